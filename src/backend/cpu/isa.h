// The vector instruction sets the CPU kernels are compiled for (sgemm, vexp), best first, and the
// one this CPU runs. The build targets plain x86-64, so kernels for AVX2 and AVX-512 are compiled
// with `#pragma GCC target` and picked at run time from the CPU's feature bits. Tested by
// tests/ops/sgemm_test.cpp and tests/ops/vexp_test.cpp (which run every set the CPU supports).
#pragma once

namespace dflash::cpu {

enum class CpuIsa { avx512, avx2, portable };

// The best set this CPU supports (AVX-512F; AVX2 with FMA; else portable), fixed for the process.
CpuIsa detected_isa();
// Whether kernels for `isa` can run here (every set at or after detected_isa()).
bool isa_supported(CpuIsa isa);
const char* isa_name(CpuIsa isa);

}  // namespace dflash::cpu

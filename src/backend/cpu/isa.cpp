// CPU instruction-set detection (isa.h).
#include "backend/cpu/isa.h"

namespace dflash::cpu {
namespace {

CpuIsa detect() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return CpuIsa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuIsa::avx2;
    return CpuIsa::portable;
}

}  // namespace

CpuIsa detected_isa() {
    static const CpuIsa isa = detect();  // a fact about the machine, fixed for the process
    return isa;
}

bool isa_supported(CpuIsa isa) {
    return static_cast<int>(isa) >= static_cast<int>(detected_isa());
}

const char* isa_name(CpuIsa isa) {
    switch (isa) {
        case CpuIsa::avx512:
            return "avx512";
        case CpuIsa::avx2:
            return "avx2";
        case CpuIsa::portable:
            break;
    }
    return "portable";
}

}  // namespace dflash::cpu

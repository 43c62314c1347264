// GEMM through BLAS. Tested by tests/ops/gemm_test.cpp.
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void gemm(const Exec&, const Tensor&, bool, const Tensor&, bool, const Tensor&, float, float) {
    DF_FAIL("not implemented yet");
}
void set_blas_threads(int) {}

}  // namespace dflash::cpu

// RMSNorm forward/backward. Tested by tests/ops/rmsnorm_test.cpp.
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void rmsnorm_fwd(const Exec&, const Tensor&, const Tensor&, float, const Tensor&, const Tensor&) {
    DF_FAIL("not implemented yet");
}
void rmsnorm_bwd(const Exec&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                 const Tensor&, const Tensor&) {
    DF_FAIL("not implemented yet");
}

}  // namespace dflash::cpu

// SwiGLU. Tested by tests/ops/swiglu_test.cpp.
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void swiglu_fwd(const Exec&, const Tensor&, const Tensor&, const Tensor&) {
    DF_FAIL("not implemented yet");
}
void swiglu_bwd(const Exec&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                const Tensor&) {
    DF_FAIL("not implemented yet");
}

}  // namespace dflash::cpu

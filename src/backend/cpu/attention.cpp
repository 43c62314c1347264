// Attention. Tested by tests/ops/attention_test.cpp.
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void attention_fwd(const Exec&, const Tensor&, const Tensor&, const Tensor&, const AttnMask&,
                   const Tensor&, const Tensor&) {
    DF_FAIL("not implemented yet");
}
void attention_bwd(const Exec&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                   const Tensor&, const Tensor&, const AttnMask&, const Tensor&, const Tensor&,
                   const Tensor&) {
    DF_FAIL("not implemented yet");
}

}  // namespace dflash::cpu

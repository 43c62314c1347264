// Embedding gather and its scatter-add backward. Tested by tests/ops/embedding_test.cpp.
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void embedding_fwd(const Exec&, const Tensor&, const Tensor&, const Tensor&) {
    DF_FAIL("not implemented yet");
}
void embedding_bwd(const Exec&, const Tensor&, const Tensor&, const Tensor&) {
    DF_FAIL("not implemented yet");
}

}  // namespace dflash::cpu

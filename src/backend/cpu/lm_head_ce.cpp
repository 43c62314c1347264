// Chunked LM head + cross-entropy. Tested by tests/ops/lm_head_ce_test.cpp.
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void lm_head_ce(const Exec&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, float,
                int64_t, const LmHeadCeOut&) {
    DF_FAIL("not implemented yet");
}

}  // namespace dflash::cpu

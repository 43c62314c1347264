// RoPE. Tested by tests/ops/rope_test.cpp.
#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void rope_fwd(const Exec&, const Tensor&, const Tensor&, const std::vector<float>&) {
    DF_FAIL("not implemented yet");
}
void rope_bwd(const Exec&, const Tensor&, const Tensor&, const std::vector<float>&) {
    DF_FAIL("not implemented yet");
}

}  // namespace dflash::cpu

namespace dflash {
std::vector<float> rope_inv_freq(const RopeConfig&, int64_t) {
    DF_FAIL("not implemented yet");
}
}  // namespace dflash

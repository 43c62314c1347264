// Residual add and scaling. Tested by tests/ops/elementwise_test.cpp.
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void add_inplace(const Exec&, const Tensor&, const Tensor&, float) {
    DF_FAIL("not implemented yet");
}
void scale_inplace(const Exec&, const Tensor&, float) {
    DF_FAIL("not implemented yet");
}

}  // namespace dflash::cpu

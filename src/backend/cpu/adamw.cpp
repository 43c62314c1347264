// AdamW and sum of squares. Tested by tests/ops/adamw_test.cpp.
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void adamw_step(const Exec&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                const AdamWParams&) {
    DF_FAIL("not implemented yet");
}
double sum_squares(const Exec&, const Tensor&) {
    DF_FAIL("not implemented yet");
}

}  // namespace dflash::cpu

// Input checks shared by the CPU op families (cpu_ops.h). Tested by tests/ops/elementwise_test.cpp
// (bad dtype and device) and by every op test that feeds an op wrong inputs.
#include "backend/cpu/cpu_ops.h"
#include "core/error.h"

namespace dflash::cpu {

void check_cpu_f32(const Tensor& t, const char* op, const char* name) {
    DF_CHECK(t.dtype() == DType::f32 && t.device().kind == DeviceKind::cpu,
             "{}: {} is {}, expected a CPU f32 tensor", op, name, t.describe());
}

}  // namespace dflash::cpu

// The dtype-and-device check the CUDA op families share: device (check_device, checks.cpp) and
// dtype, each failure naming the op and the argument (shapes: backend/op_shapes.h, shared with
// the CPU). Host code only. Tested by tests/cuda/*_cuda_test.cpp (wrong-input cases).
#pragma once

#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace dflash::cuda {

inline void check_tensor(const Exec& ex, const Tensor& t, DType dtype, const char* op,
                         const char* name) {
    check_device(ex, t, op, name);
    DF_CHECK(t.empty() || t.dtype() == dtype, "{}: {} is {}, expected {}", op, name, t.describe(),
             dtype_name(dtype));
}

}  // namespace dflash::cuda

// Tensor checks the element-wise CUDA op families share (copy, embedding, rmsnorm, rope, swiglu,
// elementwise, adamw): device (check_device, checks.cpp) and dtype, each failure naming the op and
// the argument. Host code only. Tested by tests/cuda/*_cuda_test.cpp (wrong-input cases).
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

// Same element count as `ref` (contiguous tensors: the shapes may differ).
inline void check_numel(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                        const char* ref_name) {
    DF_CHECK(t.numel() == ref.numel(),
             "{}: {} is {} but {} is {}; they need the same element count", op, name, t.describe(),
             ref_name, ref.describe());
}

// Same shape as `ref`.
inline void check_same_shape(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                             const char* ref_name) {
    DF_CHECK(t.shape() == ref.shape(), "{}: {} has shape {} but {} has {}; they must match", op,
             name, t.shape().to_string(), ref_name, ref.shape().to_string());
}

}  // namespace dflash::cuda

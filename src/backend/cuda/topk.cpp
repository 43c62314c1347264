// CUDA top-K over rows (backend/op_list.h: topk_rows): x f32 [R, V], values f32 [R, K], indices i32
// [R, K]. Tested by tests/cuda/topk_cuda_test.cpp.
#include "backend/cuda/kernels/topk.h"

#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {

void topk_rows(const Exec& ex, const Tensor& x, const Tensor& values, const Tensor& indices) {
    check_tensor(ex, x, DType::f32, "topk_rows", "x");
    check_tensor(ex, values, DType::f32, "topk_rows", "values");
    check_tensor(ex, indices, DType::i32, "topk_rows", "indices");
    check_topk_shapes(x, values, indices);
    DF_CHECK(x.dim(1) <= INT32_MAX, "topk_rows: x {} has too many columns for i32 indices",
             x.describe());
    kernels::topk_rows(x.f32(), x.dim(0), x.dim(1), values.dim(1), values.f32(), indices.i32(),
                       ex.stream);
}

}  // namespace dflash::cuda

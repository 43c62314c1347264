// CUDA element-wise family (backend/op_list.h: add_inplace, scale_inplace): y += alpha * x with y
// and x each f32 or bf16 (residual adds in bf16; gradient accumulation into f32, e.g. f32 dctx +=
// bf16 rows), y *= alpha. Only element counts must agree (contiguous tensors). Tested by
// tests/cuda/elementwise_cuda_test.cpp.
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

void check_float(const Exec& ex, const Tensor& t, const char* op, const char* name) {
    check_device(ex, t, op, name);
    DF_CHECK(t.empty() || t.dtype() == DType::f32 || t.dtype() == DType::bf16,
             "{}: {} is {}, expected f32 or bf16", op, name, t.describe());
}

}  // namespace

void add_inplace(const Exec& ex, const Tensor& y, const Tensor& x, float alpha) {
    check_float(ex, y, "add_inplace", "y");
    check_float(ex, x, "add_inplace", "x");
    check_add_inplace_shapes(y, x);
    if (y.empty()) return;
    kernels::add_inplace(y.data(), y.dtype() == DType::bf16, x.data(), x.dtype() == DType::bf16,
                         alpha, y.numel(), ex.stream);
}

void add_row_bias(const Exec& ex, const Tensor& y, const Tensor& bias) {
    check_float(ex, y, "add_row_bias", "y");
    check_float(ex, bias, "add_row_bias", "bias");
    check_add_row_bias_shapes(y, bias);
    const int64_t c = bias.numel();
    kernels::add_row_bias(y.data(), y.dtype() == DType::bf16, bias.data(),
                          bias.dtype() == DType::bf16, c, y.numel(), ex.stream);
}

void scale_inplace(const Exec& ex, const Tensor& y, float alpha) {
    check_float(ex, y, "scale_inplace", "y");
    if (y.empty()) return;
    kernels::scale_inplace(y.data(), y.dtype() == DType::bf16, alpha, y.numel(), ex.stream);
}

}  // namespace dflash::cuda

// CUDA gating family (backend/op_list.h: sigmoid_mul, add_sigmoid_scaled): x, gate, y bf16; the
// shared expert's gate logits s f32. Tested by tests/cuda/gating_cuda_test.cpp.
#include "backend/cuda/kernels/gating.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

const uint16_t* cptr(const Tensor& t) {
    return static_cast<const uint16_t*>(t.data());
}
uint16_t* ptr(const Tensor& t) {
    return static_cast<uint16_t*>(t.data());
}

}  // namespace

void sigmoid_mul(const Exec& ex, const Tensor& x, const Tensor& gate, const Tensor& y) {
    check_tensor(ex, x, DType::bf16, "sigmoid_mul", "x");
    check_tensor(ex, gate, DType::bf16, "sigmoid_mul", "gate");
    check_tensor(ex, y, DType::bf16, "sigmoid_mul", "y");
    check_sigmoid_mul_shapes(x, gate, y);
    if (x.empty()) return;
    kernels::sigmoid_mul(cptr(x), cptr(gate), ptr(y), x.numel(), ex.stream);
}

void add_sigmoid_scaled(const Exec& ex, const Tensor& y, const Tensor& x, const Tensor& s) {
    check_tensor(ex, y, DType::bf16, "add_sigmoid_scaled", "y");
    check_tensor(ex, x, DType::bf16, "add_sigmoid_scaled", "x");
    check_tensor(ex, s, DType::f32, "add_sigmoid_scaled", "s");
    const int64_t rows = check_add_sigmoid_scaled_shapes(y, x, s);
    if (y.empty()) return;
    kernels::add_sigmoid_scaled(ptr(y), cptr(x), static_cast<const float*>(s.data()), rows,
                                y.numel() / rows, ex.stream);
}

}  // namespace dflash::cuda

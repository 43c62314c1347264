// CUDA gating family (backend/op_list.h: sigmoid_mul, add_sigmoid_scaled, sigmoid_mul_bwd): x,
// gate, y and their gradients bf16; the shared expert's gate logits s and the gate's column sums
// f32. Tested by tests/cuda/gating_cuda_test.cpp.
#include "backend/cuda/kernels/gating.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/op_workspace.h"
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

void sigmoid_mul_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gate,
                     const Tensor& dx, const Tensor& dgate, const Tensor& dgate_sum) {
    check_tensor(ex, dy, DType::bf16, "sigmoid_mul_bwd", "dy");
    check_tensor(ex, x, DType::bf16, "sigmoid_mul_bwd", "x");
    check_tensor(ex, gate, DType::bf16, "sigmoid_mul_bwd", "gate");
    check_tensor(ex, dx, DType::bf16, "sigmoid_mul_bwd", "dx");
    check_tensor(ex, dgate, DType::bf16, "sigmoid_mul_bwd", "dgate");
    check_tensor(ex, dgate_sum, DType::f32, "sigmoid_mul_bwd", "dgate_sum");
    const int64_t cols = check_sigmoid_mul_bwd_shapes(dy, x, gate, dx, dgate, dgate_sum);
    if (x.empty() || cols == 0) return;
    const int64_t rows = x.numel() / cols;
    DF_CHECK(kernels::sigmoid_mul_bwd_chunks(rows) <= 65535,
             "sigmoid_mul_bwd: {} rows are more than one launch's row chunks cover", rows);
    const OpWorkspace::Scope scope(*ex.scratch);
    float* partial = nullptr;
    if (!dgate_sum.empty()) {
        partial = ex.scratch->take_n<float>(
            static_cast<size_t>(kernels::sigmoid_mul_bwd_chunks(rows) * cols),
            "sigmoid_mul_bwd column partials");
    }
    kernels::sigmoid_mul_bwd(cptr(dy), cptr(x), cptr(gate), ptr(dx), ptr(dgate), partial,
                             dgate_sum.empty() ? nullptr : dgate_sum.f32(), rows, cols, ex.stream);
}

}  // namespace dflash::cuda

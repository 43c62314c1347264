// CUDA optimizer family (backend/op_list.h: adamw_step, sum_squares, clip_scale): master, grad, m,
// v f32 of equal element counts (a whole flat parameter buffer at once), grad_scale f32 [1] on the
// device or empty, value bf16 (the compute copy) or empty; sum_squares and clip_scale f32 [1]
// outputs. The step's scalars are computed here in double exactly as the CPU reference computes
// them. Tested by tests/cuda/adamw_cuda_test.cpp.
#include <cmath>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/adamw.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

float* fptr(const Tensor& t) {
    return t.empty() ? nullptr : static_cast<float*>(t.data());
}

void check_one(const Exec& ex, const Tensor& t, const char* op, const char* name) {
    check_tensor(ex, t, DType::f32, op, name);
    check_one_element(t, op, name);
}

}  // namespace

void adamw_step(const Exec& ex, const Tensor& master, const Tensor& grad, const Tensor& m,
                const Tensor& v, const AdamWParams& p, const Tensor& grad_scale,
                const Tensor& value) {
    const char* op = "adamw_step";
    check_tensor(ex, master, DType::f32, op, "master");
    check_tensor(ex, grad, DType::f32, op, "grad");
    check_tensor(ex, m, DType::f32, op, "m");
    check_tensor(ex, v, DType::f32, op, "v");
    check_tensor(ex, grad_scale, DType::f32, op, "grad_scale");
    check_tensor(ex, value, DType::bf16, op, "value");
    check_tensor(ex, p.scalars, DType::f32, op, "scalars");
    check_adamw_args(master, grad, m, v, p, grad_scale, value);
    if (master.numel() == 0) return;
    const AdamWStepScalars step = adamw_step_scalars(p);
    kernels::AdamWScalars sc{};
    sc.b1 = p.beta1;
    sc.b2 = p.beta2;
    sc.one_m_b1 = static_cast<float>(1.0 - p.beta1);
    sc.one_m_b2 = static_cast<float>(1.0 - p.beta2);
    sc.eps = p.eps;
    sc.decay = step.decay;
    sc.step_size = step.step_size;
    sc.bc2_sqrt = step.bc2_sqrt;
    kernels::adamw_step(fptr(master), fptr(grad), fptr(m), fptr(v), master.numel(), sc,
                        fptr(p.scalars), fptr(grad_scale),
                        value.empty() ? nullptr : static_cast<uint16_t*>(value.data()), ex.stream);
}

void sum_squares(const Exec& ex, const Tensor& x, const Tensor& out) {
    check_tensor(ex, x, DType::f32, "sum_squares", "x");
    check_one(ex, out, "sum_squares", "out");
    const int64_t n = x.empty() ? 0 : x.numel();
    void* ws = ex.scratch->take(kernels::sum_squares_workspace_bytes(n), "sum_squares partials");
    kernels::sum_squares(fptr(x), n, fptr(out), ws, ex.stream);
}

void clip_scale(const Exec& ex, const Tensor& norm_sq, float max_norm, const Tensor& scale) {
    check_one(ex, norm_sq, "clip_scale", "norm_sq");
    check_one(ex, scale, "clip_scale", "scale");
    kernels::clip_scale(fptr(norm_sq), max_norm, fptr(scale), ex.stream);
}

}  // namespace dflash::cuda

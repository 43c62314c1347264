// AdamW (decoupled weight decay, as torch.optim.AdamW) on fp32 parameters, and the sum of squares
// behind the global gradient norm. Tested by tests/ops/adamw_test.cpp.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/row_kernels.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

// sum_squares adds fixed chunks, then the chunk sums in order: the result does not depend on the
// thread count.
constexpr int64_t kSumChunk = 4096;

}  // namespace

// p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * mhat / (sqrt(vhat) + eps), mhat = m / (1-b1^t), vhat = v / (1-b2^t).
// The last line is evaluated as torch does: p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps),
// with the scalar factors in double.
void adamw_step(const Exec& ex, const Tensor& master, const Tensor& grad, const Tensor& m,
                const Tensor& v, const AdamWParams& p, const Tensor& grad_scale,
                const Tensor& value) {
    check_cpu_f32(master, "adamw_step", "master");
    check_cpu_f32(grad, "adamw_step", "grad");
    check_cpu_f32(m, "adamw_step", "m");
    check_cpu_f32(v, "adamw_step", "v");
    if (!grad_scale.empty()) check_cpu_f32(grad_scale, "adamw_step", "grad_scale");
    if (!value.empty()) check_cpu_f32(value, "adamw_step", "value");
    if (!p.scalars.empty()) check_cpu_f32(p.scalars, "adamw_step", "scalars");
    check_adamw_args(master, grad, m, v, p, grad_scale, value);
    AdamWStepScalars sc = adamw_step_scalars(p);
    if (!p.scalars.empty()) sc = {p.scalars.f32()[0], p.scalars.f32()[1], p.scalars.f32()[2]};
    const AdamWLoop loop{.decay = sc.decay,
                         .step_size = sc.step_size,
                         .bc2_sqrt = sc.bc2_sqrt,
                         .b1 = p.beta1,
                         .b2 = p.beta2,
                         .eps = p.eps,
                         .one_m_b1 = static_cast<float>(1.0 - p.beta1),
                         .one_m_b2 = static_cast<float>(1.0 - p.beta2),
                         .scaled = !grad_scale.empty() && grad_scale.f32()[0] != 1.0f,
                         .gs = grad_scale.empty() ? 1.0f : grad_scale.f32()[0]};
    const int64_t n = master.numel();
    float* pp = master.f32();
    const float* pg = grad.f32();
    float* pm = m.f32();
    float* pv = v.f32();
    float* out = value.empty() ? nullptr : value.f32();
    // Elementwise, so any split gives the same bits; the loop is row_adamw (row_kernels.h).
    parallel_for(ex, n, n > 16384, [&](int64_t i0, int64_t i1) {
        row_adamw(loop, pp + i0, pg + i0, pm + i0, pv + i0, out ? out + i0 : nullptr, i1 - i0);
    });
}

void sum_squares(const Exec& ex, const Tensor& t, const Tensor& out) {
    check_cpu_f32(t, "sum_squares", "t");
    check_cpu_f32(out, "sum_squares", "out");
    check_one_element(out, "sum_squares", "out");
    const int64_t n = t.numel();
    const int64_t chunks = (n + kSumChunk - 1) / kSumChunk;
    const float* p = t.f32();
    std::vector<double> partial(chunks, 0.0);
    parallel_for(ex, chunks, n > 65536, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
            const int64_t end = std::min(n, (c + 1) * kSumChunk);
            double acc = 0;
            for (int64_t i = c * kSumChunk; i < end; ++i) acc += static_cast<double>(p[i]) * p[i];
            partial[c] = acc;
        }
    });
    double total = 0;
    for (double s : partial) total += s;
    out.f32()[0] = static_cast<float>(total);
}

void clip_scale(const Exec&, const Tensor& norm_sq, float max_norm, const Tensor& scale) {
    check_cpu_f32(norm_sq, "clip_scale", "norm_sq");
    check_cpu_f32(scale, "clip_scale", "scale");
    check_one_element(norm_sq, "clip_scale", "norm_sq");
    check_one_element(scale, "clip_scale", "scale");
    const double norm = std::sqrt(static_cast<double>(norm_sq.f32()[0]));
    // The small epsilon follows torch.nn.utils.clip_grad_norm_ (max / (norm + 1e-6)).
    const bool clip = max_norm > 0 && norm > max_norm;
    scale.f32()[0] = clip ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

}  // namespace dflash::cpu

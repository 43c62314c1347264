// Muon's element-wise ops (backend/op_list.h: muon_momentum, muon_normalize, muon_update) on f32;
// the Newton-Schulz iteration between them is gemm (train/optimizer.cpp). Tested by
// tests/train/muon_test.cpp (against the formula) and
// tests/cuda/muon_cuda_test.cpp.
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {

void muon_momentum(const Exec& ex, const Tensor& grad, const Tensor& grad_scale,
                   const Tensor& momentum, float mu, const Tensor& update) {
    check_cpu_f32(grad, "muon_momentum", "grad");
    check_cpu_f32(momentum, "muon_momentum", "momentum");
    check_cpu_f32(update, "muon_momentum", "update");
    if (!grad_scale.empty()) check_cpu_f32(grad_scale, "muon_momentum", "grad_scale");
    const int64_t n = check_muon_momentum_args(grad, grad_scale, momentum, update);
    const float gs = grad_scale.empty() ? 1.0f : grad_scale.f32()[0];
    const float* g = grad.f32();
    float* m = momentum.f32();
    float* u = update.f32();
    parallel_for(ex, n, n > 32768, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const float gi = g[i] * gs;
            m[i] = mu * m[i] + gi;
            u[i] = gi + mu * m[i];  // Nesterov: the gradient plus the new momentum's share
        }
    });
}

void muon_normalize(const Exec& ex, const Tensor& x, const Tensor& norm_sq, float eps,
                    const Tensor& out) {
    check_cpu_f32(x, "muon_normalize", "x");
    check_cpu_f32(norm_sq, "muon_normalize", "norm_sq");
    check_cpu_f32(out, "muon_normalize", "out");
    const int64_t n = check_muon_normalize_args(x, norm_sq, out);
    const float denom = std::sqrt(norm_sq.f32()[0]) + eps;
    const float* px = x.f32();
    float* po = out.f32();
    parallel_for(ex, n, n > 32768, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) po[i] = px[i] / denom;
    });
}

void muon_update(const Exec& ex, const Tensor& master, const Tensor& x, const Tensor& scalars,
                 float lr_factor, const Tensor& value) {
    check_cpu_f32(master, "muon_update", "master");
    check_cpu_f32(x, "muon_update", "x");
    check_cpu_f32(scalars, "muon_update", "scalars");
    if (!value.empty()) check_cpu_f32(value, "muon_update", "value");
    const int64_t n = check_muon_update_args(master, x, scalars, value);
    const float step = scalars.f32()[0] * lr_factor, decay = scalars.f32()[1];
    float* p = master.f32();
    const float* px = x.f32();
    float* out = value.empty() ? nullptr : value.f32();
    parallel_for(ex, n, n > 32768, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            p[i] = p[i] * decay - step * px[i];
            if (out != nullptr) out[i] = p[i];
        }
    });
}

}  // namespace dflash::cpu

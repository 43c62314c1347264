// DSpark's confidence loss, the CPU reference (semantics: Backend::confidence_bce in
// backend/op_list.h; docs/training.md "DSpark drafters"), in double as the host loop it replaced.
// Tested by tests/ops/confidence_bce_test.cpp (formula and finite differences) and as the oracle of
// tests/cuda/confidence_bce_cuda_test.cpp.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {

void confidence_bce(const Exec&, const Tensor& z, const Tensor& tv, const Tensor& weights,
                    const Tensor& grad_weights, float alpha, const Tensor& loss_rows,
                    const Tensor& dz, const Tensor& dbias) {
    check_cpu_f32(z, "confidence_bce", "z");
    check_cpu_f32(tv, "confidence_bce", "tv");
    check_cpu_f32(weights, "confidence_bce", "weights");
    check_cpu_f32(loss_rows, "confidence_bce", "loss_rows");
    if (!grad_weights.empty()) {
        check_cpu_f32(grad_weights, "confidence_bce", "grad_weights");
        check_cpu_f32(dz, "confidence_bce", "dz");
    }
    if (!dbias.empty()) check_cpu_f32(dbias, "confidence_bce", "dbias");
    const int64_t rows =
        check_confidence_bce_args(z, tv, weights, grad_weights, loss_rows, dz, dbias);
    const double a = alpha;
    double bias_sum = 0;
    for (int64_t i = 0; i < rows; ++i) {
        const double zi = z.f32()[i];
        const double target = std::clamp(1.0 - static_cast<double>(tv.f32()[i]), 0.0, 1.0);
        if (weights.f32()[i] > 0.0f) {
            // softplus(z) - c* z, stable for either sign of z.
            const double sp = std::max(zi, 0.0) + std::log1p(std::exp(-std::fabs(zi)));
            loss_rows.f32()[i] += static_cast<float>(a * (sp - target * zi));
        }
        if (grad_weights.empty()) continue;
        const double g = grad_weights.f32()[i] * a * (1.0 / (1.0 + std::exp(-zi)) - target);
        dz.f32()[i] = static_cast<float>(g);
        bias_sum += g;
    }
    if (!dbias.empty()) dbias.f32()[0] += static_cast<float>(bias_sum);
}

}  // namespace dflash::cpu

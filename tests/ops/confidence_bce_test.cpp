// cpu::confidence_bce (DSpark's confidence loss, backend/op_list.h) against a naive double loop of
// the formula (targets clamped from TV values outside [0, 1], untrained rows, logits far out on
// both sides), its dz against finite differences of sum_r grad_weights[r] * loss_rows[r] (the
// gradient's weights are the rows' weights times the step's scale), dbias the sum of dz, the
// accumulation into loss_rows and dbias, the no-gradient form, and shape errors.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

struct Rows {
    HostTensor z, tv, weights, grad_weights;
};

Rows random_rows(int64_t r, Rng& rng) {
    Rows x{HostTensor({r, 1}), HostTensor({r}), HostTensor({r}), HostTensor({r})};
    for (int64_t i = 0; i < r; ++i) {
        x.z.f32()[i] = 4.0f * rng.normal();
        x.tv.f32()[i] = 1.4f * rng.uniform() - 0.2f;  // TV rounding past [0, 1] is clamped
        const bool trained = rng.uniform() > 0.2f;
        x.weights.f32()[i] = trained ? 0.3f + rng.uniform() : 0.0f;
        x.grad_weights.f32()[i] = 0.25f * x.weights.f32()[i];
    }
    if (r > 2) {
        x.z.f32()[0] = 60.0f;
        x.z.f32()[1] = -60.0f;
    }
    return x;
}

double softplus(double z) {
    return z > 0 ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
}

TEST(ConfidenceBce, MatchesTheFormulaAndAccumulates) {
    Rng rng(3);
    const float alpha = 0.7f;
    for (int64_t r : {1, 5, 333}) {
        Rows x = random_rows(r, rng);
        HostTensor loss({r}), dz({r, 1}), dbias({1});
        for (int64_t i = 0; i < r; ++i) loss.f32()[i] = 0.5f;
        dbias.f32()[0] = 2.0f;
        cpu::confidence_bce(cpu::PooledExec{1}, x.z, x.tv, x.weights, x.grad_weights, alpha, loss,
                            dz, dbias);
        double sum = 0;
        for (int64_t i = 0; i < r; ++i) {
            const double z = x.z.f32()[i];
            const double c = std::clamp(1.0 - x.tv.f32()[i], 0.0, 1.0);
            const bool trained = x.weights.f32()[i] > 0;
            const double want = 0.5 + (trained ? alpha * (softplus(z) - c * z) : 0.0);
            EXPECT_NEAR(loss.f32()[i], want, 1e-6 * (1 + std::fabs(want))) << r << " row " << i;
            const double g = x.grad_weights.f32()[i] * alpha * (1 / (1 + std::exp(-z)) - c);
            EXPECT_NEAR(dz.f32()[i], g, 1e-7 + 1e-6 * std::fabs(g)) << r << " row " << i;
            sum += g;
        }
        EXPECT_NEAR(dbias.f32()[0], 2.0 + sum, 1e-5 * (1 + std::fabs(sum))) << r;
        // Without a gradient: the same loss, nothing else written.
        HostTensor loss2({r});
        cpu::confidence_bce(cpu::PooledExec{1}, x.z, x.tv, x.weights, Tensor(), alpha, loss2,
                            Tensor(), Tensor());
        for (int64_t i = 0; i < r; ++i)
            EXPECT_FLOAT_EQ(loss2.f32()[i] + 0.5f, loss.f32()[i]) << r << " row " << i;
    }
}

TEST(ConfidenceBce, GradientMatchesFiniteDifferences) {
    Rng rng(4);
    const int64_t r = 37;
    Rows x = random_rows(r, rng);
    for (int64_t i = 0; i < r; ++i) {
        x.z.f32()[i] = 2.0f * rng.normal();  // away from the far tails, where f32 FD is all noise
        x.tv.f32()[i] = rng.uniform();
    }
    const float alpha = 1.3f;
    // The loss the gradient belongs to: sum_r grad_weights[r] * loss_rows[r] (loss_stats weighs
    // the rows by weights; the gradient's weights are those times the step's scale).
    auto loss_of = [&](const std::vector<double>& z) {
        HostTensor zt({r, 1}), rows({r});
        for (int64_t i = 0; i < r; ++i) zt.f32()[i] = static_cast<float>(z[i]);
        cpu::confidence_bce(cpu::PooledExec{1}, zt, x.tv, x.weights, Tensor(), alpha, rows,
                            Tensor(), Tensor());
        double s = 0;
        for (int64_t i = 0; i < r; ++i) s += double{rows.f32()[i]} * x.grad_weights.f32()[i];
        return s;
    };
    std::vector<double> z0(x.z.f32(), x.z.f32() + r);
    const std::vector<double> numeric = test::fd_gradient(loss_of, z0, 1e-2);
    HostTensor loss({r}), dz({r, 1}), dbias({1});
    cpu::confidence_bce(cpu::PooledExec{1}, x.z, x.tv, x.weights, x.grad_weights, alpha, loss, dz,
                        dbias);
    // Untrained rows get no gradient from the loss, and grad_weights is 0 there too.
    const std::vector<double> analytic(dz.f32(), dz.f32() + r);
    const test::GradCheck c = test::compare_gradients(analytic, numeric);
    EXPECT_LT(c.max_rel_err, 2e-3) << c.to_string();
}

TEST(ConfidenceBce, ShapeErrors) {
    const cpu::PooledExec ex{1};
    HostTensor z({4, 1}), v4({4}), v3({3}), one({1}), two({2});
    EXPECT_THROW(cpu::confidence_bce(ex, z, v3, v4, v4, 1.0f, v4, z, one), Error);
    EXPECT_THROW(cpu::confidence_bce(ex, z, v4, v4, v4, 1.0f, v3, z, one), Error);
    EXPECT_THROW(cpu::confidence_bce(ex, z, v4, v4, v4, 1.0f, v4, Tensor(), one), Error);
    EXPECT_THROW(cpu::confidence_bce(ex, z, v4, v4, v4, 1.0f, v4, z, two), Error);
    EXPECT_THROW(cpu::confidence_bce(ex, z, v4, v4, Tensor(), 1.0f, v4, z, Tensor()), Error);
    EXPECT_NO_THROW(cpu::confidence_bce(ex, z, v4, v4, v4, 1.0f, v4, z, Tensor()));
}

}  // namespace
}  // namespace dflash

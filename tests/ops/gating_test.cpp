// cpu::sigmoid_mul and cpu::add_sigmoid_scaled (the hybrid families' attention output gate and
// shared-expert gate) against naive double formulas, including gates far out on both sides
// (|g| up to 100: no overflow), y aliasing x, shape errors and thread-count independence;
// cpu::sigmoid_mul_bwd (DSpark's gated Markov head) against finite differences of
// sum(dy * sigmoid_mul(x, gate)), with dx accumulated and the gate's column sums.
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::random_tensor;

double sigmoid(double g) {
    return 1.0 / (1.0 + std::exp(-g));
}

TEST(Gating, SigmoidMulMatchesFormulaAndMayRunInPlace) {
    Rng rng(1);
    for (const Shape& s : {Shape{1}, Shape{7, 13}, Shape{129, 3, 64}}) {
        HostTensor x = random_tensor(s, rng), g = random_tensor(s, rng, 8.0f);
        if (g.numel() > 2) {
            g.f32()[0] = 100.0f;  // sigmoid 1 exactly in f32
            g.f32()[1] = -100.0f;
        }
        HostTensor y(s);
        cpu::sigmoid_mul(cpu::PooledExec{2}, x, g, y);
        std::vector<double> ref(x.numel());
        for (int64_t i = 0; i < x.numel(); ++i) ref[i] = x.f32()[i] * sigmoid(g.f32()[i]);
        EXPECT_LT(test::max_rel_diff(y.f32(), ref), 1e-6) << s.to_string();
        HostTensor z = x.clone();
        cpu::sigmoid_mul(cpu::PooledExec{2}, z, g, z);
        EXPECT_EQ(std::memcmp(z.f32(), y.f32(), y.nbytes()), 0) << s.to_string();
    }
}

TEST(Gating, AddSigmoidScaledAddsEachRowTimesItsGate) {
    Rng rng(2);
    for (const auto& [r, c] : {std::pair<int64_t, int64_t>{1, 5}, {9, 24}, {300, 96}}) {
        HostTensor y = random_tensor({r, c}, rng), x = random_tensor({r, c}, rng);
        HostTensor s = random_tensor({r, 1}, rng, 6.0f);
        std::vector<double> ref(r * c);
        for (int64_t i = 0; i < r; ++i)
            for (int64_t j = 0; j < c; ++j)
                ref[i * c + j] = y.f32()[i * c + j] + sigmoid(s.f32()[i]) * x.f32()[i * c + j];
        HostTensor y1 = y.clone(), y3 = y.clone();
        cpu::add_sigmoid_scaled(cpu::PooledExec{1}, y1, x, s);
        EXPECT_LT(test::max_rel_diff(y1.f32(), ref), 1e-6) << r << "x" << c;
        cpu::add_sigmoid_scaled(cpu::PooledExec{3}, y3, x, s.view().reshape({r}));
        EXPECT_EQ(std::memcmp(y1.f32(), y3.f32(), y1.nbytes()), 0) << r << "x" << c;
    }
}

TEST(Gating, SigmoidMulBwdMatchesFiniteDifferences) {
    Rng rng(5);
    for (const auto& [r, c] : {std::pair<int64_t, int64_t>{1, 3}, {7, 5}, {40, 9}}) {
        const HostTensor x = random_tensor({r, c}, rng), g = random_tensor({r, c}, rng, 3.0f);
        const HostTensor dy = random_tensor({r, c}, rng);
        const int64_t n = r * c;
        // L(x, g) = sum dy * x * sigmoid(g), in double from the f32 op's output.
        auto loss = [&](const std::vector<double>& v) {
            HostTensor xv({r, c}), gv({r, c}), y({r, c});
            for (int64_t i = 0; i < n; ++i) {
                xv.f32()[i] = static_cast<float>(v[i]);
                gv.f32()[i] = static_cast<float>(v[n + i]);
            }
            cpu::sigmoid_mul(cpu::PooledExec{1}, xv, gv, y);
            double s = 0;
            for (int64_t i = 0; i < n; ++i) s += double{dy.f32()[i]} * y.f32()[i];
            return s;
        };
        std::vector<double> v0(x.f32(), x.f32() + n);
        v0.insert(v0.end(), g.f32(), g.f32() + n);
        const std::vector<double> numeric = test::fd_gradient(loss, v0, 1e-2);
        HostTensor dx = random_tensor({r, c}, rng), dgate({r, c}), sum = random_tensor({c}, rng);
        const HostTensor dx0 = dx.clone(), sum0 = sum.clone();
        cpu::sigmoid_mul_bwd(cpu::PooledExec{2}, dy, x, g, dx, dgate, sum);
        std::vector<double> analytic(2 * n);
        for (int64_t i = 0; i < n; ++i) {
            analytic[i] = double{dx.f32()[i]} - dx0.f32()[i];  // dx accumulates
            analytic[n + i] = dgate.f32()[i];
        }
        const test::GradCheck chk = test::compare_gradients(analytic, numeric);
        EXPECT_LT(chk.max_rel_err, 2e-3) << r << "x" << c << ": " << chk.to_string();
        for (int64_t j = 0; j < c; ++j) {
            double col = 0;
            for (int64_t i = 0; i < r; ++i) col += dgate.f32()[i * c + j];
            EXPECT_NEAR(sum.f32()[j], sum0.f32()[j] + col, 1e-5 * (1 + std::fabs(col)))
                << r << "x" << c << " column " << j;
        }
        // Thread count and a missing column sum change nothing else.
        HostTensor dx1 = dx0.clone(), dg1({r, c});
        cpu::sigmoid_mul_bwd(cpu::PooledExec{1}, dy, x, g, dx1, dg1, Tensor());
        EXPECT_EQ(std::memcmp(dx1.f32(), dx.f32(), dx.nbytes()), 0);
        EXPECT_EQ(std::memcmp(dg1.f32(), dgate.f32(), dgate.nbytes()), 0);
    }
}

TEST(Gating, ShapeErrors) {
    const cpu::PooledExec ex{1};
    HostTensor a({4, 6}), b({4, 5}), s3({3}), s4({4}), i4({4, 6}, DType::i32);
    EXPECT_THROW(cpu::sigmoid_mul(ex, a, b, a), Error);
    EXPECT_THROW(cpu::sigmoid_mul(ex, a, a, b), Error);
    EXPECT_THROW(cpu::sigmoid_mul(ex, a, a, i4), Error);
    EXPECT_THROW(cpu::add_sigmoid_scaled(ex, a, b, s4), Error);
    EXPECT_THROW(cpu::add_sigmoid_scaled(ex, a, a, s3), Error);
    EXPECT_NO_THROW(cpu::add_sigmoid_scaled(ex, a, a, s4));
    HostTensor c6({6}), c5({5});
    EXPECT_THROW(cpu::sigmoid_mul_bwd(ex, a, a, b, a, a, c6), Error);
    EXPECT_THROW(cpu::sigmoid_mul_bwd(ex, a, a, a, a, a, c5), Error);
    HostTensor dx({4, 6}), dg({4, 6});
    EXPECT_NO_THROW(cpu::sigmoid_mul_bwd(ex, a, a, a, dx, dg, c6));
    EXPECT_NO_THROW(cpu::sigmoid_mul_bwd(ex, a, a, a, dx, dg, Tensor()));
}

}  // namespace
}  // namespace dflash

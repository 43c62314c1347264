// cpu::rmsnorm_fwd/bwd: forward against a double formula (hidden norm and per-head q/k norm,
// awkward sizes), backward against 4-point finite differences of a double forward, dw
// accumulation, shape errors, thread-count independence.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::max_rel_diff;
using test::random_tensor;

// y = w * x / sqrt(mean(x^2) + eps) over rows of C, in double.
std::vector<double> rms_ref(const std::vector<double>& x, const std::vector<double>& w,
                            double eps) {
    const size_t c = w.size();
    std::vector<double> y(x.size());
    for (size_t r = 0; r < x.size() / c; ++r) {
        double ss = 0;
        for (size_t i = 0; i < c; ++i) ss += x[r * c + i] * x[r * c + i];
        const double s = 1.0 / std::sqrt(ss / c + eps);
        for (size_t i = 0; i < c; ++i) y[r * c + i] = w[i] * x[r * c + i] * s;
    }
    return y;
}

std::vector<double> to_f64(const Tensor& t) {
    return {t.f32(), t.f32() + t.numel()};
}

TEST(RmsNorm, ForwardMatchesDoubleFormula) {
    Rng rng(1);
    const float eps = 1e-6f;
    // [R, C] hidden norms and a per-head [S, H, Dh] norm with w [Dh].
    for (const Shape& xs : {Shape{1, 1}, Shape{7, 13}, Shape{37, 515}, Shape{5, 3, 17}}) {
        const int64_t c = xs[-1];
        HostTensor x = random_tensor(xs, rng, 2.0f), w = random_tensor({c}, rng);
        HostTensor y(xs), rstd({x.numel() / c});
        cpu::rmsnorm_fwd(cpu::PooledExec{2}, x, w, eps, y, rstd);
        const auto ref = rms_ref(to_f64(x), to_f64(w), eps);
        HostTensor ref_t(xs);
        for (size_t i = 0; i < ref.size(); ++i) ref_t.f32()[i] = static_cast<float>(ref[i]);
        // A few float roundings per element: 1e-6 of the largest output.
        EXPECT_LT(max_rel_diff(y, ref_t), 1e-6) << xs.to_string();
        // rstd: one double->float rounding of 1/sqrt(mean(x^2)+eps).
        for (int64_t r = 0; r < rstd.numel(); ++r) {
            double ss = 0;
            for (int64_t i = 0; i < c; ++i) ss += std::pow(double(x.f32()[r * c + i]), 2);
            EXPECT_NEAR(rstd.f32()[r], 1.0 / std::sqrt(ss / c + eps), 1e-6 / std::sqrt(ss / c));
        }
    }
}

TEST(RmsNorm, ForwardAcceptsEmptyRstd) {
    Rng rng(2);
    HostTensor x = random_tensor({3, 8}, rng), w = random_tensor({8}, rng);
    HostTensor y1({3, 8}), y2({3, 8}), rstd({3});
    cpu::rmsnorm_fwd(cpu::PooledExec{1}, x, w, 1e-5f, y1, rstd);
    cpu::rmsnorm_fwd(cpu::PooledExec{1}, x, w, 1e-5f, y2, Tensor());
    EXPECT_EQ(std::memcmp(y1.f32(), y2.f32(), y1.nbytes()), 0);
}

// L(x, w) = sum(dy * rmsnorm(x, w)) in double, h = 1e-3: the 4-point truncation error is
// ~h^4 * f^(5) ~ 1e-12, so the residual is the float backward's rounding (~1e-6 relative).
// Tolerance 1e-5 on the gradient's scale, or on `floor` where the gradient is a cancellation
// (see the C = 1 case).
void check_backward(const Shape& xs, uint64_t seed, double floor = 1e-6) {
    Rng rng(seed);
    const float eps = 1e-6f;
    const int64_t c = xs[-1];
    HostTensor x = random_tensor(xs, rng), w = random_tensor({c}, rng);
    HostTensor dy = random_tensor(xs, rng);
    HostTensor y(xs), rstd({x.numel() / c}), dx(xs), dw({c});
    fill_f32(dw, 0.75f);  // dw accumulates
    cpu::rmsnorm_fwd(cpu::PooledExec{1}, x, w, eps, y, rstd);
    cpu::rmsnorm_bwd(cpu::PooledExec{1}, dy, x, w, rstd, dx, dw);

    const auto xv = to_f64(x), wv = to_f64(w), dyv = to_f64(dy);
    auto loss = [&](const std::vector<double>& xa, const std::vector<double>& wa) {
        const auto yv = rms_ref(xa, wa, eps);
        double l = 0;
        for (size_t i = 0; i < yv.size(); ++i) l += dyv[i] * yv[i];
        return l;
    };
    const auto gx = test::fd_gradient([&](const auto& v) { return loss(v, wv); }, xv, 1e-3);
    const auto gw = test::fd_gradient([&](const auto& v) { return loss(xv, v); }, wv, 1e-3);
    std::vector<double> aw = to_f64(dw);
    for (double& g : aw) g -= 0.75;
    const auto rx = test::compare_gradients(to_f64(dx), gx, floor);
    const auto rw = test::compare_gradients(aw, gw);
    EXPECT_LT(rx.max_rel_err, 1e-5) << xs.to_string() << " dx " << rx.to_string();
    EXPECT_LT(rw.max_rel_err, 1e-5) << xs.to_string() << " dw " << rw.to_string();
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
    // C = 1: y = w x / sqrt(x^2 + eps) ~ w sign(x), so dx = w dy eps / (x^2 + eps)^1.5 ~ 1e-6 is
    // the difference of two O(|w dy|) terms, and the float rstd alone (6e-8 relative) moves it
    // by ~1e-7. Its error is therefore measured against the size of those terms (~1), not dx.
    check_backward({1, 1}, 3, 1.0);
    check_backward({4, 1}, 8, 1.0);
    check_backward({3, 7}, 4);
    check_backward({2, 3, 5}, 5);  // per-head: w [Dh] shared by every head
    check_backward({2, 67}, 6);    // wider than one 64-column dw block
}

TEST(RmsNorm, ShapeErrors) {
    const cpu::PooledExec ex{1};
    HostTensor x({4, 8}), w({8}), y({4, 8}), rstd({4}), w7({7}), y2({4, 7}), r3({3});
    EXPECT_THROW(cpu::rmsnorm_fwd(ex, x, w7, 1e-6f, y, rstd), Error);
    EXPECT_THROW(cpu::rmsnorm_fwd(ex, x, w, 1e-6f, y2, rstd), Error);
    EXPECT_THROW(cpu::rmsnorm_fwd(ex, x, w, 1e-6f, y, r3), Error);
    HostTensor dx({4, 8}), dw({8}), dw7({7});
    EXPECT_THROW(cpu::rmsnorm_bwd(ex, y, x, w, rstd, dx, dw7), Error);
    EXPECT_THROW(cpu::rmsnorm_bwd(ex, y2, x, w, rstd, dx, dw), Error);
    EXPECT_THROW(cpu::rmsnorm_bwd(ex, y, x, w, Tensor(), dx, dw), Error);
}

// 101 x 515 (and 101 x 3 x 67 per-head) cross the parallel threshold; dw sums over rows, so a
// row-split reduction would change bits with the thread count.
TEST(RmsNorm, ThreadCountDoesNotChangeBits) {
    Rng rng(7);
    for (const Shape& xs : {Shape{101, 515}, Shape{101, 3, 67}}) {
        const int64_t c = xs[-1], rows = xs.numel() / c;
        HostTensor x = random_tensor(xs, rng), w = random_tensor({c}, rng);
        HostTensor dy = random_tensor(xs, rng);
        HostTensor y1(xs), y3(xs), r1({rows}), r3({rows}), dx1(xs), dx3(xs), dw1({c}), dw3({c});
        cpu::rmsnorm_fwd(cpu::PooledExec{1}, x, w, 1e-6f, y1, r1);
        cpu::rmsnorm_fwd(cpu::PooledExec{3}, x, w, 1e-6f, y3, r3);
        cpu::rmsnorm_bwd(cpu::PooledExec{1}, dy, x, w, r1, dx1, dw1);
        cpu::rmsnorm_bwd(cpu::PooledExec{3}, dy, x, w, r3, dx3, dw3);
        EXPECT_EQ(std::memcmp(y1.f32(), y3.f32(), y1.nbytes()), 0);
        EXPECT_EQ(std::memcmp(r1.f32(), r3.f32(), r1.nbytes()), 0);
        EXPECT_EQ(std::memcmp(dx1.f32(), dx3.f32(), dx1.nbytes()), 0);
        EXPECT_EQ(std::memcmp(dw1.f32(), dw3.f32(), dw1.nbytes()), 0);
    }
}

}  // namespace
}  // namespace dflash

// Tests the shared finite-difference checker (tests/support/finite_diff.h): it reproduces known
// gradients to high accuracy and flags a wrong one.
#include "support/finite_diff.h"

#include <gtest/gtest.h>

#include <cmath>

namespace dflash::test {
namespace {

// f(x) = sum_i sin(x_i) * x_{i+1} + x_0^3
double f64(const std::vector<double>& x) {
    double s = x[0] * x[0] * x[0];
    for (size_t i = 0; i + 1 < x.size(); ++i) s += std::sin(x[i]) * x[i + 1];
    return s;
}

std::vector<double> grad_f(const std::vector<double>& x) {
    std::vector<double> g(x.size(), 0.0);
    g[0] = 3 * x[0] * x[0];
    for (size_t i = 0; i + 1 < x.size(); ++i) {
        g[i] += std::cos(x[i]) * x[i + 1];
        g[i + 1] += std::sin(x[i]);
    }
    return g;
}

TEST(FiniteDiff, MatchesAnalyticGradientInDouble) {
    const std::vector<double> x = {0.3, -1.2, 0.7, 2.1, -0.4};
    const GradCheck r = compare_gradients(grad_f(x), fd_gradient(f64, x, 1e-3));
    // O(h^4) truncation with h = 1e-3 plus double round-off ~1e-16/1e-3: far below 1e-9.
    EXPECT_LT(r.max_rel_err, 1e-9) << r.to_string();
}

TEST(FiniteDiff, Float32VariantAgreesToFloatPrecision) {
    const std::vector<float> xf = {0.3f, -1.2f, 0.7f, 2.1f, -0.4f};
    const std::vector<double> x(xf.begin(), xf.end());
    auto f32 = [](const std::vector<float>& v) {
        float s = v[0] * v[0] * v[0];
        for (size_t i = 0; i + 1 < v.size(); ++i) s += std::sin(v[i]) * v[i + 1];
        return static_cast<double>(s);
    };
    const GradCheck r = compare_gradients(grad_f(x), fd_gradient_f32(f32, xf, 1e-2));
    // float round-off of f (~1e-7 * |f|) divided by h = 1e-2 gives ~1e-5; allow 1e-3.
    EXPECT_LT(r.max_rel_err, 1e-3) << r.to_string();
}

TEST(FiniteDiff, FlagsAWrongGradient) {
    const std::vector<double> x = {0.3, -1.2, 0.7};
    std::vector<double> wrong = grad_f(x);
    wrong[1] *= 1.01;
    const GradCheck r = compare_gradients(wrong, fd_gradient(f64, x, 1e-3));
    EXPECT_GT(r.max_rel_err, 1e-3);
    EXPECT_EQ(r.worst_index, 1);
}

TEST(FiniteDiff, AllZeroGradientUsesTheFloor) {
    const std::vector<double> zeros(3, 0.0);
    const GradCheck r = compare_gradients(zeros, zeros);
    EXPECT_EQ(r.max_rel_err, 0.0);
    EXPECT_GT(r.scale, 0.0);
}

}  // namespace
}  // namespace dflash::test

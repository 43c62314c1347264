// cpu::sigmoid_mul and cpu::add_sigmoid_scaled (the hybrid families' attention output gate and
// shared-expert gate) against naive double formulas, including gates far out on both sides
// (|g| up to 100: no overflow), y aliasing x, shape errors and thread-count independence.
#include <cmath>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
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

TEST(Gating, ShapeErrors) {
    const cpu::PooledExec ex{1};
    HostTensor a({4, 6}), b({4, 5}), s3({3}), s4({4}), i4({4, 6}, DType::i32);
    EXPECT_THROW(cpu::sigmoid_mul(ex, a, b, a), Error);
    EXPECT_THROW(cpu::sigmoid_mul(ex, a, a, b), Error);
    EXPECT_THROW(cpu::sigmoid_mul(ex, a, a, i4), Error);
    EXPECT_THROW(cpu::add_sigmoid_scaled(ex, a, b, s4), Error);
    EXPECT_THROW(cpu::add_sigmoid_scaled(ex, a, a, s3), Error);
    EXPECT_NO_THROW(cpu::add_sigmoid_scaled(ex, a, a, s4));
}

}  // namespace
}  // namespace dflash

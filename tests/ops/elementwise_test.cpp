// cpu::add_inplace / cpu::scale_inplace against double formulas, element-count and dtype errors
// (the shared cpu::check_cpu_f32 message) and thread-count independence.
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::random_tensor;

TEST(Elementwise, AddInplaceMatchesDoubleFormula) {
    Rng rng(1);
    for (const float alpha : {1.0f, -0.37f, 0.0f}) {
        for (const int64_t n : {int64_t{1}, int64_t{13}, int64_t{1031}}) {
            HostTensor y = random_tensor({n}, rng), x = random_tensor({n}, rng), ref({n});
            for (int64_t i = 0; i < n; ++i)
                ref.f32()[i] = static_cast<float>(double(y.f32()[i]) + double(alpha) * x.f32()[i]);
            cpu::add_inplace(cpu::PooledExec{2}, y, x, alpha);
            // One product and one sum in float: within 1 ulp of the rounded double.
            EXPECT_LT(test::max_rel_diff(y, ref), 3e-7) << "alpha " << alpha << " n " << n;
        }
    }
}

TEST(Elementwise, AddInplaceAcceptsViewsOfTheSameSize) {
    // [S, H, Dh] into its [S, H*Dh] twin: only the element count has to match.
    HostTensor y = HostTensor::from_f32({2, 3}, {1, 2, 3, 4, 5, 6});
    HostTensor x = HostTensor::from_f32({2, 1, 3}, {10, 20, 30, 40, 50, 60});
    cpu::add_inplace(cpu::PooledExec{1}, y, x, 0.5f);
    const float expect[6] = {6, 12, 18, 24, 30, 36};
    for (int i = 0; i < 6; ++i) EXPECT_EQ(y.f32()[i], expect[i]) << i;
}

TEST(Elementwise, ScaleInplaceMatchesDoubleFormula) {
    Rng rng(2);
    HostTensor y = random_tensor({7, 11}, rng), ref({7, 11});
    for (int64_t i = 0; i < y.numel(); ++i)
        ref.f32()[i] = static_cast<float>(double(y.f32()[i]) * -1.7);
    cpu::scale_inplace(cpu::PooledExec{2}, y, -1.7f);
    // float(-1.7) differs from -1.7 by ~2e-8 relative, plus one rounding.
    EXPECT_LT(test::max_rel_diff(y, ref), 3e-7);
}

TEST(Elementwise, AddRowBiasAddsTheBiasToEveryRow) {
    Rng rng(5);
    HostTensor y = random_tensor({7, 3, 5}, rng), b = random_tensor({5}, rng);
    const HostTensor y0 = y.clone();
    cpu::add_row_bias(cpu::PooledExec{2}, y, b);
    for (int64_t i = 0; i < y.numel(); ++i)
        EXPECT_EQ(y.f32()[i], y0.f32()[i] + b.f32()[i % 5]) << i;
    // Large enough to be split over the pool's threads (an uneven 301 rows over 3).
    HostTensor big = random_tensor({301, 131}, rng), bb = random_tensor({131}, rng);
    const HostTensor big0 = big.clone();
    cpu::add_row_bias(cpu::PooledExec{3}, big, bb);
    for (int64_t i = 0; i < big.numel(); ++i)
        ASSERT_EQ(big.f32()[i], big0.f32()[i] + bb.f32()[i % 131]) << i;
    HostTensor b4({4});
    EXPECT_THROW(cpu::add_row_bias(cpu::PooledExec{1}, y, b4), Error);
}

TEST(Elementwise, ShapeErrors) {
    HostTensor y({4, 6}), x({4, 5}), xi({4, 6}, DType::i32);
    EXPECT_THROW(cpu::add_inplace(cpu::PooledExec{1}, y, x, 1.0f), Error);
    EXPECT_THROW(cpu::add_inplace(cpu::PooledExec{1}, y, xi, 1.0f), Error);
    EXPECT_THROW(cpu::scale_inplace(cpu::PooledExec{1}, xi, 2.0f), Error);
}

TEST(Elementwise, DtypeErrorNamesOpTensorAndWhatWasExpected) {
    HostTensor y({4, 6}), xi({4, 6}, DType::i32);
    const std::string msg =
        test::error_of([&] { cpu::add_inplace(cpu::PooledExec{1}, y, xi, 1.0f); });
    EXPECT_TRUE(test::has(msg, "add_inplace: x is")) << msg;
    EXPECT_TRUE(test::has(msg, "expected a CPU f32 tensor")) << msg;
}

TEST(Elementwise, ThreadCountDoesNotChangeBits) {
    Rng rng(3);
    HostTensor y1 = random_tensor({40009}, rng), x = random_tensor({40009}, rng);
    HostTensor y3 = y1.clone();
    cpu::add_inplace(cpu::PooledExec{1}, y1, x, 0.3f);
    cpu::add_inplace(cpu::PooledExec{3}, y3, x, 0.3f);
    cpu::scale_inplace(cpu::PooledExec{1}, y1, 1.1f);
    cpu::scale_inplace(cpu::PooledExec{3}, y3, 1.1f);
    EXPECT_EQ(std::memcmp(y1.f32(), y3.f32(), y1.nbytes()), 0);
}

}  // namespace
}  // namespace dflash

// Tensor views, HostTensor, Rng and bf16 rounding.
#include "core/tensor.h"
#include "core/dtype.h"
#include "core/rng.h"
#include "support/test_util.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace dflash {
namespace {

TEST(Tensor, ReshapeAndRowsShareData) {
    HostTensor t = HostTensor::from_f32({2, 3}, {0, 1, 2, 3, 4, 5});
    Tensor r = t.view().rows(1, 2);
    EXPECT_EQ(r.shape(), Shape({1, 3}));
    EXPECT_EQ(r.f32()[0], 3.0f);
    EXPECT_EQ(t.view().reshape({3, 2}).f32()[5], 5.0f);
    EXPECT_THROW(t.view().reshape({4, 2}), Error);
    EXPECT_THROW(t.view().i32(), Error);
}

TEST(Bf16, RoundsToNearestEven) {
    EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
    // 1 + 2^-8 lies exactly between two bf16 values: ties go to the even mantissa (down).
    EXPECT_EQ(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
    // 1 + 3*2^-8 ties between 0x3f81 and 0x3f82: even is 0x3f82.
    EXPECT_EQ(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(-2.5f)), -2.5f);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(INFINITY))));
    EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
    EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
}

// fill_normal gives the values and the final state of n normal() calls in a row, for any
// thread count; skip(k) is k next_u64() calls.
TEST(Rng, FillNormalEqualsSequentialDrawsForAnyThreadCount) {
    Rng skipped(11), stepped(11);
    skipped.skip(5);
    for (int i = 0; i < 5; ++i) stepped.next_u64();
    EXPECT_EQ(skipped.state(), stepped.state());
    const int64_t n = (int64_t{1} << 22) + 12345;  // a few threads' worth
    Rng seq(99);
    std::vector<float> want(static_cast<size_t>(n));
    for (auto& x : want) x = seq.normal() * 0.02f;
    for (int threads : {1, 2, 3, 7}) {
        Rng r(99);
        std::vector<float> got(static_cast<size_t>(n));
        fill_normal(r, got.data(), n, 0.02f, threads);
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << threads;
        EXPECT_EQ(r.state(), seq.state()) << threads;
    }
}

TEST(Rng, DeterministicAndRestorable) {
    Rng a(42), b(42);
    for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
    const uint64_t s = a.state();
    const float x = a.normal();
    a.set_state(s);
    EXPECT_EQ(a.normal(), x);
    EXPECT_NE(Rng(42).fork(1).next_u64(), Rng(42).fork(2).next_u64());
    double sum = 0, sq = 0;
    Rng r(7);
    for (int i = 0; i < 20000; ++i) {
        const double v = r.normal();
        sum += v;
        sq += v * v;
    }
    EXPECT_NEAR(sum / 20000, 0.0, 0.03);
    EXPECT_NEAR(sq / 20000, 1.0, 0.05);
}

}  // namespace
}  // namespace dflash

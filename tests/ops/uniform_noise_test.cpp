// add_uniform_noise on the CPU (backend/op_list.h, backend/noise_hash.h): every added value lies
// in [-a, a), the numbers are uniform (mean ~0, variance ~a²/3, each tenth of the range about a
// tenth of the draws), a pure function of (seed, element) (the same seed gives the same bits,
// another seed other numbers, a view at an offset the numbers of its own element indices), and a
// seed that is not i32 [2] is refused.
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/noise_hash.h"
#include "support/test_util.h"

namespace dflash {
namespace {

HostTensor seed_tensor(uint64_t s) {
    return HostTensor::from_i32({2}, {static_cast<int32_t>(static_cast<uint32_t>(s)),
                                      static_cast<int32_t>(static_cast<uint32_t>(s >> 32))});
}

HostTensor noise(int64_t n, uint64_t seed, float a) {
    HostTensor x({n});
    fill_f32(x, 0.0f);
    cpu::add_uniform_noise(cpu::PooledExec{2}, x, seed_tensor(seed), a);
    return x;
}

TEST(UniformNoise, RangeAndMoments) {
    const int64_t n = 200000;
    const float a = 0.05f;
    const HostTensor x = noise(n, 0x1234567890abcdefULL, a);
    double sum = 0, sq = 0;
    std::vector<int64_t> bins(10, 0);
    for (int64_t i = 0; i < n; ++i) {
        const double v = x.f32()[i];
        ASSERT_GE(v, -a);
        ASSERT_LT(v, a);
        sum += v;
        sq += v * v;
        ++bins[std::min<int64_t>(9, static_cast<int64_t>((v + a) / (2 * a) * 10))];
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    EXPECT_LT(std::fabs(mean), 5 * a / std::sqrt(3.0 * n));  // 5 standard errors
    EXPECT_NEAR(var, a * a / 3, 0.02 * a * a / 3);
    for (int64_t b : bins) EXPECT_NEAR(static_cast<double>(b), n / 10.0, 0.05 * n / 10.0);
}

TEST(UniformNoise, DeterministicPerSeedAndElement) {
    const HostTensor a = noise(1000, 7, 1.0f), b = noise(1000, 7, 1.0f), c = noise(1000, 8, 1.0f);
    EXPECT_EQ(std::memcmp(a.f32(), b.f32(), a.nbytes()), 0);
    int64_t same = 0;
    for (int64_t i = 0; i < 1000; ++i) same += a.f32()[i] == c.f32()[i];
    EXPECT_LT(same, 5);
    // Element i gets uniform_hash01(seed, i): the numbers do not depend on the thread split.
    for (int64_t i = 0; i < 1000; ++i)
        EXPECT_EQ(a.f32()[i], 1.0f * (2.0f * uniform_hash01(7, static_cast<uint64_t>(i)) - 1.0f));
    // Added, not written: x + noise.
    HostTensor x({3});
    fill_f32(x, 2.0f);
    cpu::add_uniform_noise(cpu::PooledExec{1}, x, seed_tensor(7), 1.0f);
    for (int64_t i = 0; i < 3; ++i) EXPECT_EQ(x.f32()[i], 2.0f + a.f32()[i]);
}

TEST(UniformNoise, BadSeedIsRefused) {
    HostTensor x({4});
    EXPECT_THROW(
        cpu::add_uniform_noise(cpu::PooledExec{1}, x, HostTensor::from_i32({1}, {3}), 1.0f), Error);
}

}  // namespace
}  // namespace dflash

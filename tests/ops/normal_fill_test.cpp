// fill_normal_hash on the CPU (backend/op_list.h, backend/noise_hash.h): the numbers are N(0,
// std^2) (mean, variance, kurtosis and the normal CDF at several points within a few standard
// errors of the sample), a pure function of (seed, element) (the same bits on any number of
// threads, another seed other numbers; a fill of any length and offset the same pairs), and the
// logarithm, cosine and sine written out of plain double operations for them agree with the C
// library's over their whole input range.
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/noise_hash.h"
#include "core/rng.h"
#include "support/test_util.h"

namespace dflash {
namespace {

HostTensor normals(int64_t n, uint64_t seed, float std, int threads) {
    HostTensor x({n});
    cpu::fill_normal_hash(cpu::PooledExec{threads}, x, seed, std);
    return x;
}

TEST(NormalFill, MomentsAndCdfOfTheNormal) {
    const int64_t n = 400000;
    const double s = 0.02;
    const HostTensor x = normals(n, 0x0123456789abcdefULL, static_cast<float>(s), 2);
    double sum = 0, sq = 0, q4 = 0;
    // The normal CDF at -2, -1, 0, 1, 2 standard deviations.
    const double at[] = {-2, -1, 0, 1, 2};
    const double cdf[] = {0.022750131948179, 0.158655253931457, 0.5, 0.841344746068543,
                          0.977249868051821};
    int64_t below[5] = {0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i) {
        const double v = x.f32()[i] / s;
        ASSERT_TRUE(std::isfinite(v));
        ASSERT_LT(std::fabs(v), 8.6);
        sum += v;
        sq += v * v;
        q4 += v * v * v * v;
        for (int k = 0; k < 5; ++k) below[k] += v < at[k];
    }
    const double mean = sum / n, var = sq / n - mean * mean;
    EXPECT_LT(std::fabs(mean), 5 / std::sqrt(double(n)));  // 5 standard errors
    EXPECT_NEAR(var, 1.0, 5 * std::sqrt(2.0 / n));         // var of s^2: 2/n
    EXPECT_NEAR(q4 / n, 3.0, 5 * std::sqrt(96.0 / n));     // var of z^4: 105 - 9
    for (int k = 0; k < 5; ++k) {
        const double p = cdf[k], se = std::sqrt(p * (1 - p) / n);
        EXPECT_NEAR(double(below[k]) / n, p, 5 * se) << "P(z < " << at[k] << ")";
    }
}

TEST(NormalFill, PureFunctionOfSeedAndElement) {
    const HostTensor a = normals(100003, 7, 0.5f, 1), b = normals(100003, 7, 0.5f, 3);
    const HostTensor c = normals(100003, 8, 0.5f, 3);
    // The thread split does not change a bit.
    EXPECT_EQ(std::memcmp(a.f32(), b.f32(), a.nbytes()), 0);
    int64_t same = 0;
    for (int64_t i = 0; i < a.numel(); ++i) same += a.f32()[i] == c.f32()[i];
    EXPECT_LT(same, 10);
    for (int64_t i = 0; i < a.numel(); i += 997)
        ASSERT_EQ(a.f32()[i], 0.5f * normal_hash(7, static_cast<uint64_t>(i))) << i;
    // A shorter fill draws the first elements of a longer one.
    const HostTensor d = normals(10, 7, 0.5f, 2);
    EXPECT_EQ(std::memcmp(a.f32(), d.f32(), d.nbytes()), 0);
}

TEST(NormalFill, LogAndCosineMatchTheMathLibrary) {
    using namespace noise_detail;
    Rng rng(5);
    // ln(m / 2^53): both ends, powers of two and their neighbours, and random m of every size.
    std::vector<uint64_t> ms = {1, 2, 3, (uint64_t{1} << 53) - 1, uint64_t{1} << 53};
    for (int e = 1; e < 53; ++e)
        for (int64_t d : {-1, 0, 1}) ms.push_back((uint64_t{1} << e) + static_cast<uint64_t>(d));
    for (int k = 0; k < 100000; ++k) ms.push_back((rng.next_u64() >> (11 + k % 53)) + 1);
    for (const uint64_t m : ms) {
        const double want = std::log(static_cast<double>(m) * 0x1p-53);  // m 2^-53 is exact
        ASSERT_NEAR(log_u53(m), want, 1e-12 * std::fabs(want) + 1e-300) << m;
    }
    // cos(2 pi a) and sin(2 pi a) over [0, 1), the folding points included.
    std::vector<double> as = {0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1 - 0x1p-53};
    for (int k = 0; k < 100000; ++k)
        as.push_back(static_cast<double>(rng.next_u64() >> 11) * 0x1p-53);
    for (const double a : as) {
        double c = 0, s = 0;
        sincos_2pi(a, &c, &s);
        ASSERT_NEAR(c, std::cos(6.283185307179586 * a), 1e-12) << a;
        ASSERT_NEAR(s, std::sin(6.283185307179586 * a), 1e-12) << a;
    }
}

}  // namespace
}  // namespace dflash

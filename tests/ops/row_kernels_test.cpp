// The row kernels (backend/cpu/row_kernels.h), for every instruction set the running CPU supports:
// each against a plain scalar loop written here from the header's contract, bit for bit (so an
// AVX-512 copy that fused a multiply and an add, or regrouped a sum, fails), on rows of every
// length from 0 to 70 at unaligned offsets, with NaN, infinities, signed zeros and subnormals among
// the inputs; the sigmoid also against the exact formula.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/row_kernels.h"
#include "backend/cpu/vexp.h"
#include "core/rng.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using cpu::CpuIsa;

using test::supported_isas;

bool same_bits(float a, float b) {
    return std::memcmp(&a, &b, sizeof(a)) == 0;
}
bool same_bits(double a, double b) {
    return std::memcmp(&a, &b, sizeof(a)) == 0;
}

// Random values, every 11th one special (NaN only where `nan`).
std::vector<float> values(Rng& rng, int64_t n, bool nan, float scale = 3.0f) {
    const float specials[] = {0.0f,
                              -0.0f,
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity(),
                              1e-40f,
                              -3e-39f,
                              1e30f,
                              -87.0f,
                              std::numeric_limits<float>::quiet_NaN()};
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        v[i] = static_cast<float>(rng.normal()) * scale;
        if (rng.below(11) == 0) v[i] = specials[rng.below(nan ? 9 : 8)];
    }
    return v;
}

// The contract of row_max / row_sum / row_sum_squares: element i into partial i mod 8, then the
// fixed tree.
float ref_max(const float* x, int64_t n) {
    float p[8];
    for (float& q : p) q = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) p[i % 8] = std::max(p[i % 8], x[i]);
    for (int w = 4; w > 0; w /= 2)
        for (int l = 0; l < w; ++l) p[l] = std::max(p[l], p[l + w]);
    return p[0];
}

double ref_sum(const float* x, int64_t n, bool squares) {
    double p[8] = {};
    for (int64_t i = 0; i < n; ++i)
        p[i % 8] += squares ? static_cast<double>(x[i]) * x[i] : static_cast<double>(x[i]);
    return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

TEST(RowKernels, ReductionsFollowTheirPartialsAndTree) {
    Rng rng(31);
    for (CpuIsa isa : supported_isas()) {
        for (int64_t n = 0; n <= 70; ++n) {
            for (int64_t off = 0; off < 3; ++off) {
                const std::vector<float> buf = values(rng, n + off, n % 5 == 0);
                const float* x = buf.data() + off;
                const float mx = cpu::row_max_with(isa, x, n);
                EXPECT_TRUE(same_bits(mx, ref_max(x, n))) << cpu::isa_name(isa) << " n=" << n;
                EXPECT_TRUE(same_bits(cpu::row_sum_with(isa, x, n), ref_sum(x, n, false)))
                    << cpu::isa_name(isa) << " sum n=" << n;
                EXPECT_TRUE(same_bits(cpu::row_sum_squares_with(isa, x, n), ref_sum(x, n, true)))
                    << cpu::isa_name(isa) << " squares n=" << n;
            }
        }
    }
}

TEST(RowKernels, ElementwiseLoopsRoundEveryOperationAlone) {
    Rng rng(32);
    for (CpuIsa isa : supported_isas()) {
        for (int64_t n = 0; n <= 70; ++n) {
            const std::vector<float> a = values(rng, n + 1, true), b = values(rng, n, true),
                                     c = values(rng, n, true);
            const float s = static_cast<float>(rng.normal());
            std::vector<float> got(a.begin() + 1, a.end()), want = got;
            cpu::row_sub_with(isa, got.data(), n, s);
            for (float& w : want) w -= s;
            cpu::row_scale_with(isa, got.data(), n, s);
            for (float& w : want) w *= s;
            std::vector<float> y(n), yw(n), z(n), zw(n);
            cpu::row_scale_weighted_with(isa, b.data(), got.data(), s, y.data(), n);
            cpu::row_mul3_with(isa, a.data() + 1, b.data(), c.data(), z.data(), n);
            for (int64_t i = 0; i < n; ++i) {
                yw[i] = b[i] * (want[i] * s);
                zw[i] = a[i + 1] * b[i] * c[i];
                ASSERT_TRUE(same_bits(got[i], want[i])) << cpu::isa_name(isa) << " sub/scale " << i;
                ASSERT_TRUE(same_bits(y[i], yw[i])) << cpu::isa_name(isa) << " weighted " << i;
                ASSERT_TRUE(same_bits(z[i], zw[i])) << cpu::isa_name(isa) << " mul3 " << i;
            }
        }
    }
}

// The sigmoid as the header states it, written here around the same exponentials (vexp.h), bit
// for bit, and within 1e-6 of 1 / (1 + e^-g).
TEST(RowKernels, SigmoidIsItsFormulaAroundTheVectorExp) {
    Rng rng(33);
    const std::vector<float> g = values(rng, 4000, true, 12.0f);
    const auto n = static_cast<int64_t>(g.size());
    for (CpuIsa isa : supported_isas()) {
        std::vector<float> got(g.size()), want(g.size());
        cpu::row_sigmoid_with(isa, g.data(), n, got.data());
        for (int64_t i = 0; i < n; ++i) want[i] = -std::fabs(g[i]);
        cpu::exp_inplace_with(isa, want.data(), n);
        for (int64_t i = 0; i < n; ++i)
            want[i] = (g[i] >= 0.0f ? 1.0f : want[i]) / (1.0f + want[i]);
        for (int64_t i = 0; i < n; ++i) {
            ASSERT_TRUE(same_bits(got[i], want[i])) << cpu::isa_name(isa) << " g=" << g[i];
            if (std::isnan(g[i])) continue;
            const double exact = 1.0 / (1.0 + std::exp(-static_cast<double>(g[i])));
            ASSERT_NEAR(got[i], exact, 1e-6 * exact + 1e-37) << cpu::isa_name(isa) << " g=" << g[i];
        }
    }
}

// AdamW's update against the same formula written here (the test is compiled for x86-64: no
// fused multiply-adds), bit for bit, with and without a gradient scale and a compute copy.
TEST(RowKernels, AdamWUpdateIsTheScalarFormulaBitForBit) {
    Rng rng(34);
    for (CpuIsa isa : supported_isas()) {
        for (const bool scaled : {false, true}) {
            const int64_t n = 1000;
            cpu::AdamWLoop a{0.9997f, 1.3e-3f, 0.0316f, 0.9f,   0.999f,
                             1e-8f,   0.1f,    0.001f,  scaled, 0.37f};
            std::vector<float> p = values(rng, n, false, 0.1f), g = values(rng, n, false),
                               m = values(rng, n, false, 0.01f), v(n);
            for (int64_t i = 0; i < n; ++i) v[i] = std::fabs(static_cast<float>(rng.normal()));
            std::vector<float> p2 = p, m2 = m, v2 = v, out(n);
            cpu::row_adamw_with(isa, a, p.data(), g.data(), m.data(), v.data(), out.data(), n);
            for (int64_t i = 0; i < n; ++i) {
                const float gi = scaled ? g[i] * a.gs : g[i];
                const float mi = a.b1 * m2[i] + a.one_m_b1 * gi;
                const float vi = a.b2 * v2[i] + a.one_m_b2 * gi * gi;
                const float pi =
                    p2[i] * a.decay - a.step_size * (mi / (std::sqrt(vi) / a.bc2_sqrt + a.eps));
                ASSERT_TRUE(same_bits(m[i], mi)) << cpu::isa_name(isa) << " m " << i;
                ASSERT_TRUE(same_bits(v[i], vi)) << cpu::isa_name(isa) << " v " << i;
                ASSERT_TRUE(same_bits(p[i], pi)) << cpu::isa_name(isa) << " p " << i;
                ASSERT_TRUE(same_bits(out[i], pi)) << cpu::isa_name(isa) << " out " << i;
            }
        }
    }
}

}  // namespace
}  // namespace dflash

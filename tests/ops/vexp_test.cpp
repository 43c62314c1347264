// cpu::exp_inplace, for every kernel family the running CPU supports: within 2 ulp of the
// correctly rounded exp over the whole normal range, the edges (overflow to inf, -inf -> 0, NaN
// stays NaN, underflow), and the same bits for an x wherever it sits in the array.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/vexp.h"
#include "core/rng.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using cpu::CpuIsa;

using test::supported_isas;

// |got - exact| in units of the float spacing at exact (exact from double exp).
double ulp_error(float got, float x) {
    const double exact = std::exp(static_cast<double>(x));
    const float fe = static_cast<float>(exact);
    const double ulp = std::nextafter(fe, std::numeric_limits<float>::infinity()) - fe;
    return std::fabs(got - exact) / ulp;
}

TEST(Vexp, WithinTwoUlpOverTheNormalRange) {
    Rng rng(21);
    std::vector<float> xs;
    for (int i = 0; i < 200000; ++i) xs.push_back(-87.3f + 176.0f * rng.uniform());
    for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 0.34657359f, -0.34657359f, 88.72f, -87.33f, 1e-8f})
        xs.push_back(x);
    for (CpuIsa isa : supported_isas()) {
        std::vector<float> y = xs;
        cpu::exp_inplace_with(isa, y.data(), static_cast<int64_t>(y.size()));
        double worst = 0;
        float at = 0;
        for (size_t i = 0; i < xs.size(); ++i) {
            if (!(xs[i] <= 88.72f)) continue;
            const double e = ulp_error(y[i], xs[i]);
            if (e > worst) worst = e, at = xs[i];
        }
        EXPECT_LE(worst, 2.0) << cpu::isa_name(isa) << " at x=" << at;
    }
}

TEST(Vexp, Edges) {
    const float inf = std::numeric_limits<float>::infinity();
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (CpuIsa isa : supported_isas()) {
        std::vector<float> y = {inf, -inf, nan, 88.8f, 1000.0f, -1000.0f, -104.0f, 0.0f};
        cpu::exp_inplace_with(isa, y.data(), static_cast<int64_t>(y.size()));
        SCOPED_TRACE(cpu::isa_name(isa));
        EXPECT_EQ(y[0], inf);
        EXPECT_EQ(y[1], 0.0f);
        EXPECT_TRUE(std::isnan(y[2]));
        EXPECT_EQ(y[3], inf);
        EXPECT_EQ(y[4], inf);
        EXPECT_EQ(y[5], 0.0f);
        EXPECT_LT(y[6], 1e-44f);  // below the normal range: a denormal or 0
        EXPECT_EQ(y[7], 1.0f);
    }
}

// x at every position of arrays of every length up to 40 (the masked tails) gives the same bits.
TEST(Vexp, SameBitsAnywhereInTheArray) {
    Rng rng(22);
    std::vector<float> base(40);
    for (float& x : base) x = -20.0f + 40.0f * rng.uniform();
    for (CpuIsa isa : supported_isas()) {
        std::vector<float> whole = base;
        cpu::exp_inplace_with(isa, whole.data(), 40);
        for (int64_t start = 0; start < 40; ++start) {
            for (int64_t len = 1; start + len <= 40; len += 7) {
                std::vector<float> part(base.begin() + start, base.begin() + start + len);
                cpu::exp_inplace_with(isa, part.data(), len);
                ASSERT_EQ(std::memcmp(part.data(), whole.data() + start, len * sizeof(float)), 0)
                    << cpu::isa_name(isa) << " start " << start << " len " << len;
            }
        }
    }
}

}  // namespace
}  // namespace dflash

// cpu::sgemm, for every kernel family the running CPU supports (avx512, avx2, portable): NT, NN,
// TN and TT products with alpha/beta and padded leading dimensions against a double product;
// C outside [M, N] untouched and not read when beta = 0; and the determinism Note [sgemm]
// promises: a row computed alone or among 8 (a decode vs a verify), and a column computed in a
// narrower product, have the same bits.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/sgemm.h"
#include "core/rng.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using cpu::CpuIsa;
using cpu::MatrixRef;

using test::supported_isas;

// A stored matrix of `rows` x `cols` with leading dimension cols + pad, random values.
struct Stored {
    int64_t rows, cols, ld;
    std::vector<float> v;
    Stored(int64_t r, int64_t c, int64_t pad, Rng& rng) : rows(r), cols(c), ld(c + pad) {
        v.resize(static_cast<size_t>(std::max<int64_t>(1, r * ld)));
        for (float& x : v) x = static_cast<float>(rng.normal());
    }
    double at(int64_t r, int64_t c) const { return v[r * ld + c]; }
};

struct Case {
    int64_t m, n, k;
    bool ta, tb;
};

// Runs one product with `isa` and checks it against double; returns C.
void check_case(CpuIsa isa, const Case& cs, float alpha, float beta, Rng& rng) {
    const Stored a = cs.ta ? Stored(cs.k, cs.m, 3, rng) : Stored(cs.m, cs.k, 5, rng);
    const Stored b = cs.tb ? Stored(cs.n, cs.k, 2, rng) : Stored(cs.k, cs.n, 7, rng);
    const int64_t ldc = cs.n + 4;
    std::vector<float> c(static_cast<size_t>(cs.m * ldc));
    for (float& x : c) x = static_cast<float>(rng.normal());
    const std::vector<float> c0 = c;
    if (beta == 0.0f) {  // C is not read: NaNs inside [M, N] must vanish
        for (int64_t i = 0; i < cs.m; ++i)
            for (int64_t j = 0; j < cs.n; ++j)
                c[i * ldc + j] = std::numeric_limits<float>::quiet_NaN();
    }
    cpu::sgemm_with(isa, cs.m, cs.n, cs.k, alpha, {a.v.data(), a.ld, cs.ta},
                    {b.v.data(), b.ld, cs.tb}, beta, c.data(), ldc);
    double worst = 0;
    for (int64_t i = 0; i < cs.m; ++i) {
        for (int64_t j = 0; j < ldc; ++j) {
            const size_t at = static_cast<size_t>(i * ldc + j);
            if (j >= cs.n) {  // padding columns: untouched
                ASSERT_EQ(std::memcmp(&c[at], &c0[at], sizeof(float)), 0) << i << "," << j;
                continue;
            }
            double ref = 0, mag = 0;
            for (int64_t p = 0; p < cs.k; ++p) {
                const double x = cs.ta ? a.at(p, i) : a.at(i, p);
                const double y = cs.tb ? b.at(j, p) : b.at(p, j);
                ref += x * y;
                mag += std::fabs(x * y);
            }
            ref = alpha * ref + (beta == 0.0f ? 0.0 : beta * double(c0[at]));
            // fp32 accumulation: error ~ K * 2^-24 * sum |x*y| at worst; 1e-6 * (mag + 1) covers
            // K <= 130 with margin, and a wrong element is off by O(1).
            const double err = std::fabs(c[at] - ref) / (std::fabs(alpha) * mag + 1.0);
            worst = std::max(worst, std::isnan(err) ? 1e9 : err);
        }
    }
    EXPECT_LT(worst, 1e-6) << cpu::isa_name(isa) << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k
                           << " ta=" << cs.ta << " tb=" << cs.tb << " beta=" << beta;
}

TEST(Sgemm, EveryKernelFamilyMatchesDoubleOnAwkwardShapes) {
    Rng rng(11);
    const int64_t sizes[] = {1, 2, 3, 5, 8, 9, 15, 16, 17, 31, 33, 64, 65, 130};
    for (CpuIsa isa : supported_isas()) {
        for (int combo = 0; combo < 4; ++combo) {
            for (int t = 0; t < 40; ++t) {
                const Case cs{sizes[rng.below(14)], sizes[rng.below(14)], sizes[rng.below(14)],
                              (combo & 1) != 0, (combo & 2) != 0};
                check_case(isa, cs, t % 3 == 0 ? 1.0f : 0.75f, t % 2 == 0 ? 0.0f : -0.5f, rng);
            }
        }
    }
}

// The kernels' blocking (256 KB of the shared operand) kicks in at large K and N.
TEST(Sgemm, LargeOperandsMatchDouble) {
    Rng rng(12);
    for (CpuIsa isa : supported_isas()) {
        check_case(isa, {70, 600, 1100, false, true}, 1.0f, 1.0f, rng);
        check_case(isa, {300, 130, 1100, false, false}, 1.0f, 0.0f, rng);
        check_case(isa, {130, 70, 1100, true, false}, 1.0f, 1.0f, rng);
    }
}

// C = op(A) op(B) computed whole, and row by row (M = 1, the way picked on the whole M), and for
// column ranges only: 8 rows (NT as dot products) and 40 (NT on transposed panels of B).
TEST(Sgemm, RowsAndColumnsDoNotDependOnTheRestOfTheProduct) {
    Rng rng(13);
    const int64_t n = 203, k = 301;
    for (CpuIsa isa : supported_isas()) {
        for (const int64_t m : {int64_t{8}, int64_t{40}}) {
            for (int combo = 0; combo < 3; ++combo) {  // NT, NN, TN
                const bool ta = combo == 2, tb = combo == 0;
                const Stored a = ta ? Stored(k, m, 0, rng) : Stored(m, k, 0, rng);
                const Stored b = tb ? Stored(n, k, 0, rng) : Stored(k, n, 0, rng);
                const MatrixRef ra{a.v.data(), a.ld, ta}, rb{b.v.data(), b.ld, tb};
                std::vector<float> whole(m * n), part(m * n);
                cpu::sgemm_with(isa, m, n, k, 1.0f, ra, rb, 0.0f, whole.data(), n);
                for (int64_t i = 0; i < m; ++i) {
                    const MatrixRef ri{ta ? a.v.data() + i : a.v.data() + i * a.ld, a.ld, ta};
                    cpu::sgemm_with(isa, 1, n, k, 1.0f, ri, rb, 0.0f, part.data() + i * n, n, m);
                }
                EXPECT_EQ(std::memcmp(whole.data(), part.data(), whole.size() * 4), 0)
                    << cpu::isa_name(isa) << " m=" << m << " combo " << combo << ": rows";
                for (const int64_t j0 : {int64_t{1}, int64_t{7}, int64_t{100}}) {
                    const int64_t j1 = std::min(n, j0 + 37);
                    const MatrixRef rj{tb ? b.v.data() + j0 * b.ld : b.v.data() + j0, b.ld, tb};
                    cpu::sgemm_with(isa, m, j1 - j0, k, 1.0f, ra, rj, 0.0f, part.data() + j0, n);
                }
                EXPECT_EQ(std::memcmp(whole.data(), part.data(), whole.size() * 4), 0)
                    << cpu::isa_name(isa) << " m=" << m << " combo " << combo << ": columns";
            }
        }
    }
}

TEST(Sgemm, ReportsTheKernelsInUse) {
    const CpuIsa isa = cpu::detected_isa();
    std::printf("sgemm kernels on this CPU: %s\n", cpu::isa_name(isa));
    EXPECT_FALSE(supported_isas().empty());
}

}  // namespace
}  // namespace dflash

// Anchor sampling: the HEAD candidate rule, distinct sorted draws, determinism, and uniformity.
#include "data/anchors.h"

#include <set>

#include "core/error.h"
#include "support/test_util.h"

namespace dflash {
namespace {

std::vector<uint8_t> random_mask(Rng& rng, size_t n, double p_one) {
    std::vector<uint8_t> m(n);
    for (auto& v : m) v = rng.uniform_f64() < p_one ? 1 : 0;
    return m;
}

TEST(Anchors, PropertiesHoldOnRandomMasks) {
    Rng mask_rng(1);
    Rng rng(2);
    for (int trial = 0; trial < 300; ++trial) {
        const size_t S = 1 + mask_rng.below(200);
        const auto mask = random_mask(mask_rng, S, 0.2 + 0.7 * mask_rng.uniform_f64());
        const int64_t want_n = static_cast<int64_t>(mask_rng.below(80));
        int64_t n_cand = 0;
        for (size_t p = 0; p + 1 < S; ++p) n_cand += mask[p] && mask[p + 1];
        const auto a = sample_anchors(mask, want_n, rng);
        ASSERT_EQ(static_cast<int64_t>(a.size()), std::min(want_n, n_cand));
        for (size_t i = 0; i < a.size(); ++i) {
            ASSERT_GE(a[i], 0);
            ASSERT_LE(a[i], static_cast<int32_t>(S) - 2);
            ASSERT_TRUE(mask[a[i]] && mask[a[i] + 1]) << "anchor " << a[i];
            if (i > 0) {
                ASSERT_LT(a[i - 1], a[i]);  // sorted and distinct
            }
        }
    }
}

TEST(Anchors, TakesEveryCandidateWhenAskedForMore) {
    const std::vector<uint8_t> mask = {0, 1, 1, 1, 0, 1, 1, 0, 1};
    Rng rng(3);
    EXPECT_EQ(sample_anchors(mask, 512, rng), (std::vector<int32_t>{1, 2, 5}));
    EXPECT_EQ(anchor_candidates(mask), (std::vector<int32_t>{1, 2, 5}));
}

TEST(Anchors, EmptyWithoutCandidates) {
    Rng rng(4);
    EXPECT_TRUE(sample_anchors(std::vector<uint8_t>{}, 8, rng).empty());
    EXPECT_TRUE(sample_anchors(std::vector<uint8_t>{1}, 8, rng).empty());
    EXPECT_TRUE(sample_anchors(std::vector<uint8_t>(50, 0), 8, rng).empty());
    EXPECT_TRUE(sample_anchors(std::vector<uint8_t>{1, 0, 1, 0, 1, 0, 1}, 8, rng).empty());
    EXPECT_TRUE(sample_anchors(std::vector<uint8_t>(50, 1), 0, rng).empty());
    EXPECT_THROW(sample_anchors(std::vector<uint8_t>(50, 1), -1, rng), Error);
}

TEST(Anchors, DeterministicGivenTheRng) {
    const std::vector<uint8_t> mask(300, 1);
    Rng a(77), b(77), c(78);
    const auto x = sample_anchors(mask, 40, a);
    EXPECT_EQ(x, sample_anchors(mask, 40, b));
    EXPECT_EQ(a.state(), b.state());
    EXPECT_NE(x, sample_anchors(mask, 40, c));
    EXPECT_NE(x, sample_anchors(mask, 40, a));  // the stream advanced
}

// Each of C candidates should be drawn with probability k/C. Over T draws the inclusion counts
// give a chi-square-like statistic sum (o-e)^2/e, which for fair sampling is about
// (1-k/C) * chi2(C-1): mean ~14 here. The bound 45 is above chi2(19)'s 99.9% quantile (43.8),
// while a sampler biased by even 10% on a few candidates scores in the hundreds.
TEST(Anchors, RoughlyUniformOverCandidates) {
    std::vector<uint8_t> mask;
    for (int blk = 0; blk < 10; ++blk) mask.insert(mask.end(), {0, 1, 1, 1});  // 20 candidates
    const auto cand = anchor_candidates(mask);
    ASSERT_EQ(cand.size(), 20u);
    Rng rng(123);
    const int trials = 20000, k = 5;
    std::vector<double> hits(mask.size(), 0.0);
    for (int t = 0; t < trials; ++t) {
        for (int32_t p : sample_anchors(mask, k, rng)) hits[p] += 1;
    }
    const double e = static_cast<double>(trials) * k / 20.0;
    double chi2 = 0;
    for (int32_t p : cand) chi2 += (hits[p] - e) * (hits[p] - e) / e;
    EXPECT_LT(chi2, 45.0);
    for (size_t p = 0; p < mask.size(); ++p) {
        if (!std::count(cand.begin(), cand.end(), static_cast<int32_t>(p))) {
            EXPECT_EQ(hits[p], 0);
        }
    }
}

}  // namespace
}  // namespace dflash

// Anchor sampling: the consecutive-pair candidate rule, distinct sorted draws, determinism,
// uniformity, and independence from batch-mates (each sequence's own stream, padding ignored).
#include "data/anchors.h"

#include <algorithm>
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

// Document-aware anchors: every block [p, p + B) lies inside one document, for random packs of
// random documents; and every candidate that does is kept (nothing else is dropped).
TEST(DocumentAnchors, BlocksNeverStraddleADocumentBoundary) {
    Rng rng(77);
    for (int trial = 0; trial < 200; ++trial) {
        const int64_t B = 2 + static_cast<int64_t>(rng.below(6));
        std::vector<int32_t> starts;
        std::vector<uint8_t> mask;
        const int docs = 1 + static_cast<int>(rng.below(5));
        for (int d = 0; d < docs; ++d) {
            starts.push_back(static_cast<int32_t>(mask.size()));
            const int64_t len = 1 + static_cast<int64_t>(rng.below(20));
            for (int64_t i = 0; i < len; ++i) mask.push_back(rng.below(4) != 0);
        }
        const auto doc_of = [&](int64_t p) {
            return std::upper_bound(starts.begin(), starts.end(), p) - starts.begin() - 1;
        };
        const auto cand = document_anchor_candidates(mask, starts, B);
        for (int32_t p : anchor_candidates(mask)) {
            const auto S = static_cast<int64_t>(mask.size());
            const bool fits = p + B <= S && doc_of(p) == doc_of(p + B - 1);
            EXPECT_EQ(std::count(cand.begin(), cand.end(), p), fits ? 1 : 0)
                << "trial " << trial << " p=" << p << " B=" << B;
        }
        const auto picked = sample_document_anchors(mask, starts, B, 4, rng);
        const auto ctx = anchor_document_starts(picked, starts);
        ASSERT_EQ(ctx.size(), picked.size());
        for (size_t j = 0; j < picked.size(); ++j) {
            EXPECT_EQ(ctx[j], starts[doc_of(picked[j])]);
            EXPECT_EQ(doc_of(picked[j]), doc_of(picked[j] + B - 1));
        }
    }
}

TEST(DocumentAnchors, OneDocumentWhereEveryBlockFitsDrawsLikeSampleAnchors) {
    std::vector<uint8_t> mask(40, 1);
    for (int i = 30; i < 40; ++i) mask[i] = 0;  // the last candidate, 28, still fits B = 4
    Rng a(5), b(5);
    EXPECT_EQ(sample_document_anchors(mask, {}, 4, 7, a), sample_anchors(mask, 7, b));
    EXPECT_EQ(anchor_document_starts(std::vector<int32_t>{3, 9}, {}), (std::vector<int32_t>{0, 0}));
    const std::vector<int32_t> bad = {1, 5};  // must start at 0
    EXPECT_THROW(document_anchor_candidates(mask, bad, 4), Error);
}

// The stream is the one training checkpoints record (Rng(anchor_seed).fork(epoch).fork(index)),
// so runs written before sequence_anchor_rng existed resume with the anchors they would have
// drawn; and it changes with each part of its key.
TEST(BatchInvariantAnchors, StreamIsKeyedBySeedEpochAndSequenceOnly) {
    const uint64_t seed = 0x1234;
    EXPECT_EQ(sequence_anchor_rng(seed, 3, 17).state(), Rng(seed).fork(3).fork(17).state());
    const uint64_t s = sequence_anchor_rng(seed, 3, 17).state();
    EXPECT_NE(s, sequence_anchor_rng(seed + 1, 3, 17).state());
    EXPECT_NE(s, sequence_anchor_rng(seed, 4, 17).state());
    EXPECT_NE(s, sequence_anchor_rng(seed, 3, 18).state());
}

// A row padded into a batch of rows of other lengths (padding = loss mask 0, as a padded batch
// has) gets exactly the anchors it gets alone, whatever its batch-mates and their order: nothing
// is capped by the padded length or by another row's candidate count, and no stream is shared.
TEST(BatchInvariantAnchors, PaddedRowDrawsTheSameAnchorsAsAlone) {
    Rng gen(99);
    const int64_t N = 6, B = 4;
    for (int trial = 0; trial < 50; ++trial) {
        // A batch of rows of different lengths and response densities; some with fewer
        // candidates than N, some with none.
        const int rows = 2 + static_cast<int>(gen.below(4));
        std::vector<std::vector<uint8_t>> masks;
        std::vector<std::vector<int32_t>> starts;  // two documents each
        size_t longest = 0;
        for (int r = 0; r < rows; ++r) {
            const size_t len = 2 + gen.below(60);
            masks.push_back(random_mask(gen, len, 0.1 + 0.8 * gen.uniform_f64()));
            starts.push_back({0, static_cast<int32_t>(len / 2)});
            longest = std::max(longest, len);
        }
        const uint64_t first_index = gen.below(1000);
        const auto alone = [&](int r, bool documents) {
            Rng rng = sequence_anchor_rng(7, 2, first_index + static_cast<uint64_t>(r));
            return documents ? sample_document_anchors(masks[r], starts[r], B, N, rng)
                             : sample_anchors(masks[r], N, rng);
        };
        // In the batch: every row padded to the longest, drawn last row first.
        for (const bool documents : {false, true}) {
            for (int r = rows - 1; r >= 0; --r) {
                std::vector<uint8_t> padded = masks[r];
                padded.resize(longest, 0);
                // The padding is a document of its own, so no block of the row may run into it.
                std::vector<int32_t> padded_starts = starts[r];
                if (padded.size() > masks[r].size())
                    padded_starts.push_back(static_cast<int32_t>(masks[r].size()));
                Rng rng = sequence_anchor_rng(7, 2, first_index + static_cast<uint64_t>(r));
                const auto in_batch =
                    documents ? sample_document_anchors(padded, padded_starts, B, N, rng)
                              : sample_anchors(padded, N, rng);
                EXPECT_EQ(in_batch, alone(r, documents))
                    << "trial " << trial << " row " << r << " documents " << documents;
            }
        }
    }
}

}  // namespace
}  // namespace dflash

// The index arithmetic and per-row merge rules of the CUDA LM head and argmax kernels
// (backend/cuda/kernels/row_stats.h), exhaustively on the CPU: chunk bounds tile [0, V) for every
// (V, chunk) up to 300; the lm_head_ce workspace parts are aligned, disjoint and in bounds; the
// chunk-by-chunk merge gives the direct log-sum-exp, the lowest-index argmax (ties inside and
// across chunks) and the label-free sum; the two-stage argmax split covers each row once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cuda/kernels/row_stats.h"
#include "core/rng.h"

namespace dflash::cuda {
namespace {

TEST(RowStats, ChunkBoundsTileTheVocabulary) {
    for (int64_t v = 1; v <= 300; ++v) {
        for (int64_t chunk = 1; chunk <= 310; chunk += (chunk < 40 ? 1 : 7)) {
            const int64_t step = lm_step(v, chunk);
            ASSERT_EQ(step, std::min(v, chunk));
            const int64_t chunks = lm_chunk_count(v, step);
            int64_t next = 0;
            for (int64_t c = 0; c < chunks; ++c) {
                const int64_t b = lm_chunk_begin(c, step), n = lm_chunk_size(c, v, step);
                ASSERT_EQ(b, next) << "v=" << v << " chunk=" << chunk << " c=" << c;
                ASSERT_GE(n, 1);
                ASSERT_LE(n, step);
                next = b + n;
            }
            ASSERT_EQ(next, v) << "v=" << v << " chunk=" << chunk;
        }
    }
}

TEST(RowStats, WorkspacePartsAreAlignedDisjointAndInBounds) {
    for (int64_t rows : {0, 1, 3, 64, 65, 16384}) {
        for (int64_t vocab : {1, 5, 8192, 151936}) {
            for (int64_t chunk : {1, 7, 4096, 8192, 200000}) {
                const LmHeadCeLayout l = lm_head_ce_layout(rows, vocab, chunk);
                const int64_t step = lm_step(vocab, chunk);
                struct Part {
                    int64_t at, len;
                };
                const std::vector<Part> parts = {
                    {l.logits, rows * step}, {l.probs, (rows * step + 1) / 2},
                    {l.row_max, rows},       {l.row_sum, rows},
                    {l.row_rest, rows},      {l.label_logit, rows},
                    {l.row_arg, rows},       {l.lse, rows}};
                for (size_t i = 0; i < parts.size(); ++i) {
                    ASSERT_EQ(parts[i].at % 64, 0) << "part " << i;  // 256-byte aligned
                    ASSERT_LE(parts[i].at + parts[i].len, l.total) << "part " << i;
                    for (size_t j = i + 1; j < parts.size(); ++j) {
                        const bool disjoint = parts[i].at + parts[i].len <= parts[j].at ||
                                              parts[j].at + parts[j].len <= parts[i].at;
                        ASSERT_TRUE(disjoint) << "parts " << i << " and " << j << " rows=" << rows
                                              << " vocab=" << vocab << " chunk=" << chunk;
                    }
                }
            }
        }
    }
}

TEST(RowStats, ArgmaxTieRuleIsLowestIndex) {
    EXPECT_TRUE(argmax_better(2.0f, 9, 1.0f, 0));
    EXPECT_FALSE(argmax_better(1.0f, 0, 2.0f, 9));
    EXPECT_TRUE(argmax_better(1.0f, 3, 1.0f, 4));
    EXPECT_FALSE(argmax_better(1.0f, 4, 1.0f, 3));
    EXPECT_TRUE(argmax_better(-INFINITY, 0, -INFINITY, INT32_MAX));
    EXPECT_FALSE(argmax_better(std::numeric_limits<float>::quiet_NaN(), 0, 1.0f, 5));
}

// Simulates the kernel: per chunk the max/argmax, then sums relative to the new running max.
TEST(RowStats, ChunkMergeMatchesDirectLogSumExp) {
    Rng rng(7);
    for (int trial = 0; trial < 400; ++trial) {
        const int64_t v = 1 + static_cast<int64_t>(rng.below(300));
        const int64_t chunk = 1 + static_cast<int64_t>(rng.below(static_cast<uint64_t>(v) + 20));
        const int32_t label = static_cast<int32_t>(rng.below(static_cast<uint64_t>(v)));
        std::vector<float> x(static_cast<size_t>(v));
        // Few distinct values (ties inside and across chunks) and a drifting scale.
        for (auto& e : x) e = std::round(rng.normal() * 3.0f) * (trial % 2 ? 1.0f : 0.37f);
        const int64_t step = lm_step(v, chunk), chunks = lm_chunk_count(v, step);
        LmRowState st{0, 0, 0, 0};
        for (int64_t c = 0; c < chunks; ++c) {
            const int64_t b = lm_chunk_begin(c, step), n = lm_chunk_size(c, v, step);
            float best = -INFINITY;
            int32_t best_i = INT32_MAX;
            for (int64_t i = b; i < b + n; ++i)
                if (argmax_better(x[i], static_cast<int32_t>(i), best, best_i))
                    best = x[i], best_i = static_cast<int32_t>(i);
            const bool first = c == 0;
            const float m = first ? best : std::max(st.max, best);
            float sum = 0, rest = 0;
            for (int64_t i = b; i < b + n; ++i) {
                sum += std::exp(x[i] - m);
                if (i != label) rest += std::exp(x[i] - m);
            }
            st = lm_merge_chunk(st, first, best, best_i, m, sum, rest);
        }
        double mx = -INFINITY;
        int64_t arg = 0;
        for (int64_t i = 0; i < v; ++i)
            if (x[i] > mx) mx = x[i], arg = i;
        double s = 0, r = 0;
        for (int64_t i = 0; i < v; ++i) {
            s += std::exp(x[i] - mx);
            if (i != label) r += std::exp(x[i] - mx);
        }
        ASSERT_EQ(st.arg, arg) << "trial " << trial << " v=" << v << " chunk=" << chunk;
        ASSERT_EQ(st.max, static_cast<float>(mx));
        ASSERT_NEAR(st.max + std::log(st.sum), mx + std::log(s), 1e-5 * (1 + std::fabs(mx)))
            << "trial " << trial;
        ASSERT_NEAR(st.rest, r, 1e-5 * (1 + r)) << "trial " << trial;
    }
}

TEST(RowStats, RescaleIsExactlyOneWhenTheMaxStays) {
    EXPECT_EQ(lm_rescale(true, 3.0f, 5.0f), 0.0f);
    EXPECT_EQ(lm_rescale(false, 5.0f, 5.0f), 1.0f);
    EXPECT_FLOAT_EQ(lm_rescale(false, 3.0f, 5.0f), std::exp(-2.0f));
}

TEST(RowStats, ArgmaxSplitCoversEachRowOnce) {
    for (int64_t rows : {1, 2, 7, 16, 300}) {
        for (int64_t vocab : {1, 3, 1023, 1024, 1025, 32000, 151936, 152064}) {
            for (int64_t sms : {1, 132}) {
                const int64_t threads = 256;
                const ArgmaxSplit s = argmax_split(rows, vocab, sms, threads);
                ASSERT_GE(s.splits, 1);
                ASSERT_EQ(s.span % (4 * threads), 0);
                ASSERT_GE(s.span * s.splits, vocab) << rows << " " << vocab;
                ASSERT_LT(s.span * (s.splits - 1), vocab)
                    << "an empty split: " << rows << " " << vocab;
                if (rows == 1 && vocab >= 151936 && sms == 132) {
                    EXPECT_GE(s.splits, 64) << "one decode row should fill the GPU";
                }
            }
        }
    }
}

}  // namespace
}  // namespace dflash::cuda

// cpu::selector_inject / selector_ce / selector_stats / selector_unary_bwd (DFlash2's selector
// loss, docs/training.md "The selector's loss"): hard target injection on a hand-made row, the
// K-way cross-entropy against a double formula (with output multiplier and soft cap) and its
// gradients against finite differences, the metrics of hand-made blocks (recall, teacher-forced
// accuracy, path and oracle runs), and the unary backward against its formula.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::ids_tensor;
using test::random_tensor;
using test::vec_tensor;

TEST(SelectorInject, KeepsHitsAndInjectsMissesWithTheirOwnLogit) {
    // Row 0: the label (1) is in the top-2; row 1: the label (0) is not; row 2: not trained.
    HostTensor logits =
        HostTensor::from_f32({3, 4}, {0.1f, 0.9f, 0.5f, 0.2f, -1.0f, 3.0f, 2.0f, 1.0f, 1, 2, 3, 4});
    HostTensor values({3, 2}), ids({3, 2}, DType::i32), pos({3}, DType::i32), hit({3}, DType::i32);
    const cpu::PooledExec ex{1};
    cpu::topk_rows(ex, logits, values, ids);
    cpu::selector_inject(ex, logits, ids_tensor({1, 0, -1}), values, ids, pos, hit);
    EXPECT_EQ(ids.i32()[0], 1);
    EXPECT_EQ(ids.i32()[1], 2);
    EXPECT_EQ(pos.i32()[0], 0);
    EXPECT_EQ(hit.i32()[0], 1);
    // The weakest candidate (id 2, logit 2) gives way to the target with its own logit -1.
    EXPECT_EQ(ids.i32()[2], 1);
    EXPECT_EQ(ids.i32()[3], 0);
    EXPECT_FLOAT_EQ(values.f32()[3], -1.0f);
    EXPECT_EQ(pos.i32()[1], 1);
    EXPECT_EQ(hit.i32()[1], 0);
    EXPECT_EQ(pos.i32()[2], -1);
    EXPECT_EQ(hit.i32()[2], 0);
    EXPECT_EQ(ids.i32()[4], 3);  // untouched
    EXPECT_TRUE(test::has(
        test::error_of([&] {
            cpu::selector_inject(ex, logits, ids_tensor({7, 0, 0}), values, ids, pos, hit);
        }),
        "label 7"));
}

struct CeCase {
    int64_t R, K;
    float m, cap;
};

double unary_ref(double l, const CeCase& c) {
    const double u = l * c.m;
    return c.cap > 0 ? c.cap * std::tanh(u / c.cap) : u;
}

// sum_r gw_r * CE_r in double.
double ce_ref(const CeCase& c, const std::vector<double>& v, const std::vector<double>& pair,
              const std::vector<int32_t>& pos, const std::vector<float>& gw) {
    double total = 0;
    for (int64_t r = 0; r < c.R; ++r) {
        if (pos[r] < 0 || gw[r] == 0.0f) continue;
        std::vector<double> s(c.K);
        for (int64_t k = 0; k < c.K; ++k) s[k] = unary_ref(v[r * c.K + k], c) + pair[r * c.K + k];
        const double mx = *std::max_element(s.begin(), s.end());
        double z = 0;
        for (double x : s) z += std::exp(x - mx);
        total += gw[r] * (mx + std::log(z) - s[pos[r]]);
    }
    return total;
}

TEST(SelectorCe, LossAndGradientsMatchFormulaAndFiniteDifferences) {
    Rng rng(3);
    for (const CeCase& c : {CeCase{5, 7, 1.0f, 0.0f}, CeCase{6, 3, 0.37f, 2.5f},
                            CeCase{1, 1, 2.0f, 0.0f}, CeCase{9, 16, 0.2f, 20.0f}}) {
        HostTensor values = random_tensor({c.R, c.K}, rng, 3.0f),
                   pair = random_tensor({c.R, 1, c.K}, rng);
        std::vector<int32_t> pos(c.R);
        std::vector<float> w(c.R), gw(c.R);
        for (int64_t r = 0; r < c.R; ++r) {
            pos[r] = static_cast<int32_t>(rng.below(c.K + 1)) - 1;  // -1: not trained
            w[r] = r % 4 == 3 ? 0.0f : 0.5f + static_cast<float>(r);
            gw[r] = w[r] * 0.25f;
        }
        HostTensor loss({c.R}), pick({c.R}, DType::i32), dv({c.R, c.K}), dp({c.R, c.K});
        SelectorCeArgs a;
        a.values = values;
        a.pair = pair;
        const HostTensor post = ids_tensor(pos);
        a.label_pos = post;
        const HostTensor wt = vec_tensor(w), gwt = vec_tensor(gw);
        a.weights = wt;
        a.grad_weights = gwt;
        a.multiplier = c.m;
        a.softcap = c.cap;
        a.loss_rows = loss;
        a.pick = pick;
        a.dvalues = dv;
        a.dpair = dp;
        cpu::selector_ce(cpu::PooledExec{2}, a);
        const auto vv = test::to_double(values), pv = test::to_double(pair);
        for (int64_t r = 0; r < c.R; ++r) {
            // The loss row alone (weight 1) and the pick: the argmax of the scores.
            std::vector<float> one(c.R, 0.0f);
            one[r] = w[r];
            const double ref = w[r] != 0.0f ? ce_ref(c, vv, pv, pos, one) / w[r] : 0.0;
            EXPECT_NEAR(loss.f32()[r], ref, 1e-5 * std::max(1.0, std::abs(ref))) << r;
            int64_t best = 0;
            for (int64_t k = 1; k < c.K; ++k)
                if (unary_ref(vv[r * c.K + k], c) + pv[r * c.K + k] >
                    unary_ref(vv[r * c.K + best], c) + pv[r * c.K + best])
                    best = k;
            EXPECT_EQ(pick.i32()[r], best) << r;
        }
        const auto nv =
            test::fd_gradient([&](const auto& x) { return ce_ref(c, x, pv, pos, gw); }, vv, 1e-4);
        const auto np =
            test::fd_gradient([&](const auto& x) { return ce_ref(c, vv, x, pos, gw); }, pv, 1e-4);
        const auto rv = test::compare_gradients(test::to_double(dv), nv);
        const auto rp = test::compare_gradients(test::to_double(dp), np);
        EXPECT_LT(rv.max_rel_err, 1e-5) << "dvalues K=" << c.K << " " << rv.to_string();
        EXPECT_LT(rp.max_rel_err, 1e-5) << "dpair K=" << c.K << " " << rp.to_string();
    }
}

TEST(SelectorStats, CountsRecallAccuracyAndRuns) {
    // Two blocks of 4 rows (row 0: the anchor, weight 0) and one untrained block.
    // Block 0: row 1 hit+picked, row 2 hit but picked wrong, row 3 hit+picked.
    // Block 1: row 1 missed (injected) but picked the injected target, rows 2-3 hit+picked; row 3
    // untrained.
    const std::vector<float> w = {0, 1, 0.5f, 0.25f, 0, 1, 0.5f, 0, 0, 0, 0, 0};
    const std::vector<int32_t> hit = {0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0};
    const std::vector<int32_t> pos = {-1, 2, 0, 5, -1, 15, 3, 3, -1, -1, -1, -1};
    const std::vector<int32_t> pick = {0, 2, 1, 5, 0, 15, 3, 3, 0, 0, 0, 0};
    std::vector<float> loss(12);
    for (size_t i = 0; i < loss.size(); ++i) loss[i] = 0.1f * static_cast<float>(i);
    const SelectorStatsLayout lay{4};
    HostTensor stats({lay.size()});
    fill_f32(stats, 0.0f);
    stats.f32()[SelectorStatsLayout::kRows] = 10.0f;  // accumulated, not overwritten
    cpu::selector_stats(cpu::PooledExec{1}, vec_tensor(loss), ids_tensor(pick), ids_tensor(pos),
                        ids_tensor(hit), vec_tensor(w), 4, stats);
    const float* s = stats.f32();
    EXPECT_NEAR(s[SelectorStatsLayout::kLossSum], 0.1 + 0.5 * 0.2 + 0.25 * 0.3 + 0.5 + 0.5 * 0.6,
                1e-6);
    EXPECT_EQ(s[SelectorStatsLayout::kRows], 10 + 5);
    EXPECT_EQ(s[SelectorStatsLayout::kHits], 4);
    EXPECT_EQ(s[SelectorStatsLayout::kPicks], 4);
    EXPECT_EQ(s[SelectorStatsLayout::kBlocks], 2);
    EXPECT_EQ(s[SelectorStatsLayout::kPathRun], 1);    // block 0: 1, block 1: 0 (a miss)
    EXPECT_EQ(s[SelectorStatsLayout::kOracleRun], 3);  // block 0: 3, block 1: 0
    EXPECT_EQ(s[lay.path_count(1)], 2);
    EXPECT_EQ(s[lay.path_correct(1)], 1);
    EXPECT_EQ(s[lay.path_count(2)], 1);
    EXPECT_EQ(s[lay.path_correct(2)], 0);
    EXPECT_EQ(s[lay.path_count(3)], 0);
    EXPECT_THROW(cpu::selector_stats(cpu::PooledExec{1}, vec_tensor(loss), ids_tensor(pick),
                                     ids_tensor(pos), ids_tensor(hit), vec_tensor(w), 5, stats),
                 Error);
}

TEST(SelectorUnaryBwd, SumsTheCandidatesRows) {
    Rng rng(4);
    const int64_t R = 5, K = 3, V = 4, D = 7;
    HostTensor dv = random_tensor({R, K}, rng), w = random_tensor({V, D}, rng), out({R, D});
    std::vector<int32_t> ids(R * K);
    for (auto& id : ids) id = static_cast<int32_t>(rng.below(V));  // repeats within rows too
    HostTensor ids2({R, K}, DType::i32);
    std::copy(ids.begin(), ids.end(), ids2.i32());
    cpu::selector_unary_bwd(cpu::PooledExec{2}, dv, ids2, w, out);
    std::vector<double> ref(R * D, 0.0);
    for (int64_t r = 0; r < R; ++r)
        for (int64_t k = 0; k < K; ++k)
            for (int64_t c = 0; c < D; ++c)
                ref[r * D + c] +=
                    static_cast<double>(dv.f32()[r * K + k]) * w.f32()[ids[r * K + k] * D + c];
    EXPECT_LT(test::max_rel_diff(out.f32(), ref), 1e-6);
    ids2.i32()[4] = V;
    EXPECT_TRUE(test::has(
        test::error_of([&] { cpu::selector_unary_bwd(cpu::PooledExec{1}, dv, ids2, w, out); }),
        "outside the vocabulary"));
}

}  // namespace
}  // namespace dflash

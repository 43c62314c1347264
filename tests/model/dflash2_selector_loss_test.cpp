// DFlash2's selector training loss through the drafter (model/selector_loss.h, docs/training.md
// "The selector's loss"): the gradient of unary + alpha * selector loss against finite differences
// for the selector's tensors and the backbone's, with injected targets among the rows; the metrics
// against a host recomputation from the inference lattice (CandidateSelector) of the same weights;
// alpha = 0 leaves the selector without gradient; and a neutral selector (the init of `dflash init
// drafter`) learns: a few AdamW steps move all three selector tensors and lower the selector loss.
#include <algorithm>
#include <cmath>
#include <map>

#include "model/candidate_selector.h"
#include "model/selector_loss.h"
#include "support/tiny_models.h"
#include "train/optimizer.h"

namespace dflash {
namespace {

struct SelPair {
    TargetModel target;
    DrafterModel drafter;
    std::vector<int32_t> toks;
    std::vector<uint8_t> mask;
    std::vector<int32_t> anchors;
    HostTensor feats;
};

// V = 37, K = 5: most targets of a random drafter miss the strict top-K, so both the hit and the
// injected path are exercised. `neutral`: the selector as DrafterModel::random leaves it.
SelPair make_setup(Backend& be, uint64_t seed, bool neutral, float std = 0.3f, int64_t top_k = 5) {
    const auto tc = test::tiny_target_config(true, 4);
    TargetModel t = TargetModel::random(be, tc, seed, 0.3f);
    auto dc = test::tiny_dflash2_config(tc, 2, 4, top_k);
    dc.d2.output_multiplier = 0.8;
    dc.d2.final_logit_softcapping = 6.0;
    DrafterModel d = DrafterModel::random(be, dc, seed + 1, std);
    if (!neutral) test::randomize_dflash2_modules(d, seed + 2, 0.3f);
    const int64_t S = 15;
    std::vector<int32_t> toks = test::random_tokens(S, tc.vocab_size, seed + 3);
    std::vector<uint8_t> mask(S, 1);
    mask[0] = mask[1] = mask[8] = 0;
    HostTensor feats({S, d.feature_dim()});
    Workspace ws = test::test_workspace(be);
    t.forward(be, ws, toks, d.config().target_layer_ids, feats, Tensor());
    return {std::move(t), std::move(d), toks, mask, {1, 5, 9, 12}, std::move(feats)};
}

struct Sums {
    double unary = 0, weight = 0;
    std::vector<float> sel;  // SelectorStatsLayout
};

Sums step(Backend& be, SelPair& s, double alpha, float grad_scale = 1.0f) {
    Workspace ws = test::test_workspace(be);
    const int64_t B = s.drafter.block_size();
    HostTensor stats({LossStatsLayout{B}.size()}), sel({SelectorStatsLayout{B}.size()});
    BlockObjective o;
    o.selector_stats = sel;
    o.selector_alpha = alpha;
    s.drafter.train_step(be, ws, {s.feats, s.toks, s.mask, s.anchors},
                         {s.target.embed(), s.target.lm_head(), 3.0, 7}, {grad_scale, stats}, o);
    return {stats.f32()[LossStatsLayout::kLossSum], stats.f32()[LossStatsLayout::kWeightSum],
            std::vector<float>(sel.f32(), sel.f32() + sel.numel())};
}

// The selector's tensors (or their gradients), copied to the host.
std::map<std::string, HostTensor> selector_tensors(const DrafterModel& d, bool grads = false) {
    std::map<std::string, HostTensor> w;
    for (const auto& p : d.params().params())
        if (p.name.starts_with("candidate_selector."))
            w.emplace(p.name,
                      grads ? to_host_f32(d.backend(), p.grad) : d.params().read_f32(p.name));
    return w;
}

double whole_loss(Backend& be, SelPair& s, double alpha) {
    const Sums m = step(be, s, alpha);
    return m.unary + alpha * m.sel[SelectorStatsLayout::kLossSum];
}

// K = V: every token is a candidate, so the loss is smooth in every weight (no top-K boundary to
// cross under a finite-difference step) and the whole gradient, backbone included, is checked.
TEST(SelectorLoss, GradientOfTheWholeLossMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    SelPair s = make_setup(*be, 71, /*neutral=*/false, 0.3f, /*top_k=*/37);
    s.drafter.params().enable_training();
    const double alpha = 0.7;
    s.drafter.params().zero_grads();
    const Sums m = step(*be, s, alpha);
    EXPECT_GT(m.sel[SelectorStatsLayout::kLossSum], 0);
    test::expect_param_grads_match_fd(
        *be, s.drafter.params(), [&] { return whole_loss(*be, s, alpha); }, 3, 3, 1e-5, 2e-3, 2e-2);
}

// K = 5 of 37, so most targets are injected: the selector's own tensors do not move the top-K
// (it depends on the unary logits alone), so their gradients are checked with injection at work.
TEST(SelectorLoss, SelectorGradientsWithInjectedTargetsMatchFiniteDifferences) {
    auto be = make_cpu_backend(1);
    SelPair s = make_setup(*be, 75, /*neutral=*/false);
    s.drafter.params().enable_training();
    const double alpha = 1.3;
    s.drafter.params().zero_grads();
    const Sums m = step(*be, s, alpha);
    const float rows = m.sel[SelectorStatsLayout::kRows], hits = m.sel[SelectorStatsLayout::kHits];
    EXPECT_GT(hits, 0);
    EXPECT_LT(hits, rows);
    // A snapshot: the finite differences run the backward again (gradients accumulate).
    const auto grads = selector_tensors(s.drafter, /*grads=*/true);
    Rng rng(9);
    for (const auto& [name, g] : grads) {
        Tensor w = s.drafter.params().value(name);
        const auto idx = test::fd_check_indices(g.f32(), g.numel(), 4, 4, rng);
        EXPECT_GT(std::fabs(g.f32()[idx[0]]), 1e-4) << name << " gets no gradient";
        for (int64_t i : idx) {
            const double fd = test::fd_derivative_in_place(
                w.f32()[i], [&] { return whole_loss(*be, s, alpha); }, 1e-2f);
            EXPECT_NEAR(g.f32()[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << name << "[" << i << "]";
        }
    }
}

TEST(SelectorLoss, AlphaZeroLeavesTheSelectorAloneButReportsIt) {
    auto be = make_cpu_backend(1);
    SelPair s = make_setup(*be, 72, /*neutral=*/false);
    s.drafter.params().enable_training();
    s.drafter.params().zero_grads();
    const Sums m = step(*be, s, 0.0);
    EXPECT_GT(m.sel[SelectorStatsLayout::kRows], 0);
    EXPECT_GT(m.sel[SelectorStatsLayout::kLossSum], 0);
    for (const char* name :
         {"candidate_selector.hidden_projection.weight", "candidate_selector.predecessor_codebook",
          "candidate_selector.successor_codebook"}) {
        const HostTensor g = to_host_f32(*be, s.drafter.params().grad(name));
        EXPECT_EQ(test::max_abs_diff(g, HostTensor(g.shape())), 0.0) << name;
    }
}

// The metrics from a host walk over CandidateSelector's lattices (the inference path) of each
// block, with the data's tokens as targets.
TEST(SelectorLoss, MetricsMatchTheInferenceLattice) {
    auto be = make_cpu_backend(1);
    SelPair s = make_setup(*be, 73, /*neutral=*/false);
    const Sums m = step(*be, s, 1.0);
    const int64_t B = s.drafter.block_size(), D = s.drafter.dims().D;
    const int64_t V = s.target.config().vocab_size, N = static_cast<int64_t>(s.anchors.size());
    Workspace ws = test::test_workspace(*be);
    HostTensor hf({N * B, D});
    s.drafter.block_hidden(*be, ws, s.target.embed(), s.feats, s.toks, s.anchors, hf);
    double rows = 0, hits = 0, path_run = 0, oracle_run = 0, blocks = 0;
    for (int64_t j = 0; j < N; ++j) {
        const int64_t a = s.anchors[j];
        const Tensor h = hf.view().rows(j * B + 1, (j + 1) * B);
        HostTensor logits({B - 1, V}), z({B - 1, s.drafter.config().d2.selector_rank});
        be->gemm(h, false, s.target.lm_head(), true, logits);
        be->gemm(h, false, s.drafter.params().value("candidate_selector.hidden_projection.weight"),
                 true, z);
        CandidateSelector sel(s.drafter, *be, B - 1);
        CandidateLattice lat;
        sel.select(logits, z, s.toks[a], lat);
        bool alive = true, oracle = true;
        const bool trained_1 = a + 1 < static_cast<int64_t>(s.toks.size()) && s.mask[a + 1];
        blocks += trained_1;
        int64_t prev = 0;  // the path's predecessor index in the previous slot (slot 0: anchor)
        for (int64_t p = 0; p < B - 1; ++p) {
            const int64_t pos = a + p + 1;
            const bool trained = pos < static_cast<int64_t>(s.toks.size()) && s.mask[pos];
            if (!trained) {
                alive = oracle = false;
                continue;
            }
            rows += 1;
            const int32_t t = s.toks[pos];
            const auto* ids = &lat.ids[p * lat.K];
            const bool hit = std::find(ids, ids + lat.K, t) != ids + lat.K;
            hits += hit;
            oracle = oracle && hit;
            oracle_run += oracle;
            int64_t best = 0;
            for (int64_t c = 1; c < lat.K; ++c)
                if (lat.score(p, p == 0 ? 0 : prev, c) > lat.score(p, p == 0 ? 0 : prev, best))
                    best = c;
            alive = alive && ids[best] == t;
            path_run += alive;
            prev = best;
        }
    }
    EXPECT_EQ(m.sel[SelectorStatsLayout::kRows], rows);
    EXPECT_EQ(m.sel[SelectorStatsLayout::kHits], hits);
    EXPECT_EQ(m.sel[SelectorStatsLayout::kBlocks], blocks);
    EXPECT_EQ(m.sel[SelectorStatsLayout::kOracleRun], oracle_run);
    EXPECT_EQ(m.sel[SelectorStatsLayout::kPathRun], path_run);
}

TEST(SelectorLoss, NeutralSelectorLearns) {
    auto be = make_cpu_backend(1);
    SelPair s = make_setup(*be, 74, /*neutral=*/true, 0.3f);
    // The neutral init scores nothing: every pair score is 0 (successor codebook 0).
    const auto before = selector_tensors(s.drafter);
    EXPECT_EQ(
        test::max_abs_diff(before.at("candidate_selector.successor_codebook"),
                           HostTensor(before.at("candidate_selector.successor_codebook").shape())),
        0.0);
    s.drafter.params().enable_training();
    train::AdamW opt(s.drafter.params(), {});
    double first = 0, last = 0;
    for (int i = 0; i < 12; ++i) {
        s.drafter.params().zero_grads();
        const Sums m = step(*be, s, 1.0, 1.0f / 4.0f);
        const double sel = m.sel[SelectorStatsLayout::kLossSum] / m.weight;
        if (i == 0) first = sel;
        last = sel;
        opt.step(*be, s.drafter.params(), 3e-2, Tensor());
    }
    EXPECT_LT(last, 0.8 * first) << "the selector loss should fall from " << first;
    for (const auto& [name, w0] : before)
        EXPECT_GT(test::max_abs_diff(s.drafter.params().read_f32(name), w0), 1e-4)
            << name << " did not move";
}

}  // namespace
}  // namespace dflash

// Sliding-window drafter layers (docs/training.md "Sliding-window drafter layers"): for DFlash
// drafters (causal windows) and DFlash2 drafters (causal and bidirectional windows), the training
// path's logits of every block equal the decoding path's (context cache + block over a causal
// window) while the sliding layers' bounded caches move their rows several times; the training
// step's gradients match finite differences through the windowed masks, and recomputing the layers
// in the backward (train.recompute_layers) gives the same bits; config.json carries the
// layout both ways and bad layouts are refused naming the key, in config.json and in the
// drafter.* settings.
#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "support/finite_diff.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "train/drafter_training.h"

namespace dflash {
namespace {

using test::random_tokens;

struct WindowCase {
    const char* name;
    bool dflash2;
    int is_causal;  // -1: absent (sliding layers causal), 0: bidirectional windows (DFlash2)
    std::vector<bool> sliding;
    int64_t window;
};

DrafterConfig window_config(const TargetConfig& tc, const WindowCase& c) {
    DrafterConfig d =
        c.dflash2 ? test::tiny_dflash2_config(tc, static_cast<int64_t>(c.sliding.size()), 4)
                  : test::tiny_drafter_config(tc, static_cast<int64_t>(c.sliding.size()), 4);
    d.sliding_layers = c.sliding;
    d.sliding_window = c.window;
    d.is_causal = c.is_causal;
    const auto p = d.problems();
    EXPECT_TRUE(p.empty()) << p.front();
    return d;
}

HostTensor target_features(Backend& be, const TargetModel& t, const DrafterModel& d,
                           const std::vector<int32_t>& toks) {
    Workspace ws = test::test_workspace(be);
    HostTensor f({static_cast<int64_t>(toks.size()), d.feature_dim()});
    t.forward(be, ws, toks, d.config().target_layer_ids, f, Tensor());
    return f;
}

class DrafterWindowTest : public ::testing::TestWithParam<WindowCase> {};

TEST_P(DrafterWindowTest, TrainingLogitsEqualDecodingOverTheWindow) {
    const WindowCase& c = GetParam();
    auto be = make_cpu_backend(1);
    const TargetConfig tc = test::tiny_target_config(true, 4);
    TargetModel target = TargetModel::random(*be, tc, 61, 0.3f);
    DrafterModel drafter = DrafterModel::random(*be, window_config(tc, c), 62, 0.3f);
    if (c.dflash2) test::randomize_dflash2_modules(drafter, 63, 0.3f);
    const int64_t S = 40, B = drafter.block_size(), V = tc.vocab_size;
    const auto toks = random_tokens(S, V, 64);
    HostTensor feats = target_features(*be, target, drafter, toks);
    // No context, less than the window, more than it, far more (the cache has moved), the end.
    const std::vector<int32_t> anchors = {0, 2, 9, 23, 31, 39};
    Workspace ws = test::test_workspace(*be);
    HostTensor hf({static_cast<int64_t>(anchors.size()) * B, drafter.dims().D});
    drafter.block_hidden(*be, ws, target.embed(), feats, toks, anchors, hf);
    HostTensor train_logits({hf.dim(0), V});
    be->gemm(hf, false, target.lm_head(), true, train_logits);
    if (c.dflash2) {
        // DFlash2's logits pass its output multiplier and cap (none here: both neutral).
        ASSERT_EQ(drafter.config().d2.output_multiplier, 1.0);
        ASSERT_EQ(drafter.config().d2.final_logit_softcapping, 0.0);
    }

    for (size_t j = 0; j < anchors.size(); ++j) {
        const int64_t a = anchors[j];
        // Context in pieces of at most 3 rows, a block drafted after each: the bounded caches
        // (2(W-1) + 3 + B rows) must move their rows to hold the window.
        DrafterSession s(drafter, *be, target.embed(), target.lm_head(), 64, B, 3);
        for (int64_t l = 0; l < static_cast<int64_t>(c.sliding.size()); ++l) {
            const int64_t bounded = 2 * (c.window - 1) + 3 + B;
            EXPECT_EQ(s.cache_rows(l), c.sliding[l] ? bounded : 64 + B) << "layer " << l;
        }
        HostTensor logits({B - 1, V});
        for (int64_t done = 0; done < a;) {
            const int64_t n = std::min<int64_t>(5, a - done);  // split again into rows of 3
            s.draft(feats.view().rows(done, done + n), toks[done + n], logits);
            done += n;
        }
        if (a == 0) s.draft(Tensor(), toks[0], logits);
        EXPECT_EQ(s.context_length(), a);
        const Tensor ref = train_logits.view().rows(j * B + 1, (j + 1) * B);
        EXPECT_LT(test::max_rel_diff(logits, ref), 1e-5) << c.name << " anchor " << a;
    }
}

TEST_P(DrafterWindowTest, GradientMatchesFiniteDifferences) {
    const WindowCase& c = GetParam();
    auto be = make_cpu_backend(1);
    const TargetConfig tc = test::tiny_target_config(true, 4);
    TargetModel target = TargetModel::random(*be, tc, 71, 0.3f);
    DrafterModel drafter = DrafterModel::random(*be, window_config(tc, c), 72, 0.3f);
    if (c.dflash2) test::randomize_dflash2_modules(drafter, 73, 0.3f);
    drafter.params().enable_training();
    const int64_t S = 16, V = tc.vocab_size;
    const auto toks = random_tokens(S, V, 74);
    std::vector<uint8_t> mask(S, 1);
    mask[0] = mask[1] = 0;
    HostTensor feats = target_features(*be, target, drafter, toks);
    const std::vector<int32_t> anchors = {2, 7, 12};
    auto loss = [&]() {
        return test::drafter_step(*be, drafter, target, feats, toks, mask, anchors, 3.0, 1.0f, 7)
            .loss_sum;
    };
    drafter.params().zero_grads();
    test::drafter_step(*be, drafter, target, feats, toks, mask, anchors, 3.0, 1.0f, 7);
    // Every tensor the block loss reaches (DFlash2's selector learns from its own loss, not run
    // here): its 3 largest gradients and 3 random ones against 4-point finite differences.
    // loss() runs the backward again: the gradients are read before any of it.
    std::vector<HostTensor> grads;
    for (const auto& prm : drafter.params().params()) grads.push_back(to_host_f32(*be, prm.grad));
    Rng rng(75);
    for (size_t p = 0; p < grads.size(); ++p) {
        const Param& prm = drafter.params().params()[p];
        if (prm.name.starts_with("candidate_selector.")) continue;
        const HostTensor& g = grads[p];
        const auto idx = test::fd_check_indices(g.f32(), g.numel(), 3, 3, rng);
        EXPECT_GT(std::fabs(g.f32()[idx[0]]), 1e-4) << prm.name << " gets no gradient";
        for (int64_t i : idx) {
            const double fd = test::fd_derivative_in_place(prm.value.f32()[i], loss, 1e-2f);
            EXPECT_NEAR(g.f32()[i], fd, 2e-3 + 2e-2 * std::fabs(fd)) << prm.name << "[" << i << "]";
        }
    }
}

// train.recompute_layers (Note [Recomputed layers] in src/model/drafter.cpp): the same loss and
// gradient bits as keeping every layer's activations.
TEST_P(DrafterWindowTest, RecomputedLayersGiveTheSameBits) {
    const WindowCase& c = GetParam();
    auto be = make_cpu_backend(1);
    const TargetConfig tc = test::tiny_target_config(true, 4);
    TargetModel target = TargetModel::random(*be, tc, 81, 0.3f);
    DrafterModel drafter = DrafterModel::random(*be, window_config(tc, c), 82, 0.3f);
    if (c.dflash2) test::randomize_dflash2_modules(drafter, 83, 0.3f);
    drafter.params().enable_training();
    const int64_t S = 30, B = drafter.block_size();
    const auto toks = random_tokens(S, tc.vocab_size, 84);
    const std::vector<uint8_t> mask(S, 1);
    HostTensor feats = target_features(*be, target, drafter, toks);
    const std::vector<int32_t> anchors = {1, 6, 13, 20, 27};
    auto run = [&](bool recompute) {
        drafter.params().zero_grads();
        Workspace ws = test::test_workspace(*be);
        HostTensor stats({LossStatsLayout{B}.size()});
        DrafterLossSpec spec{target.embed(), target.lm_head(), 3.0, 7};
        spec.recompute_layers = recompute;
        drafter.train_step(*be, ws, {feats, toks, mask, anchors}, spec, {1.0f, stats});
        HostTensor grads(drafter.params().flat_grads().shape());
        copy_tensor(grads, drafter.params().flat_grads());
        return std::pair{std::move(stats), std::move(grads)};
    };
    const auto kept = run(false), recomputed = run(true);
    EXPECT_EQ(std::memcmp(kept.first.f32(), recomputed.first.f32(), kept.first.nbytes()), 0);
    EXPECT_EQ(std::memcmp(kept.second.f32(), recomputed.second.f32(), kept.second.nbytes()), 0);
    double norm = 0;
    for (int64_t i = 0; i < kept.second.numel(); ++i) norm += std::fabs(kept.second.f32()[i]);
    EXPECT_GT(norm, 0.0);
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DrafterWindowTest,
    ::testing::Values(WindowCase{"dflash_w2", false, -1, {true, false}, 2},
                      WindowCase{"dflash_w5_all", false, -1, {true, true}, 5},
                      WindowCase{"dflash2_causal_w3", true, -1, {false, true}, 3},
                      WindowCase{"dflash2_bidirectional_w3", true, 0, {true, true}, 3}),
    [](const ::testing::TestParamInfo<WindowCase>& i) { return std::string(i.param.name); });

// config.json carries the layout: layer_types per layer, sliding_window, use_sliding_window.
TEST(DrafterWindowConfig, JsonRoundTripAndKeys) {
    const TargetConfig tc = test::tiny_target_config(true, 4);
    DrafterConfig d = test::tiny_drafter_config(tc, 3, 4);
    d.sliding_layers = {true, true, false};
    d.sliding_window = 2048;
    const nlohmann::json j = d.to_json();
    EXPECT_EQ(j["layer_types"],
              nlohmann::json({"sliding_attention", "sliding_attention", "full_attention"}));
    EXPECT_EQ(j["sliding_window"], 2048);
    EXPECT_EQ(j["use_sliding_window"], true);
    EXPECT_EQ(j["max_window_layers"], 3);
    const DrafterConfig back = DrafterConfig::from_json(j);
    EXPECT_EQ(back.sliding_layers, d.sliding_layers);
    EXPECT_EQ(back.sliding_window, 2048);
    EXPECT_TRUE(back.layer_causal(0));
    EXPECT_FALSE(back.layer_causal(2));
    EXPECT_EQ(back.layer_window(1), 2048);
    EXPECT_EQ(back.layer_window(2), 0);
    // A drafter without sliding layers writes what it always wrote.
    const nlohmann::json plain = test::tiny_drafter_config(tc, 2, 4).to_json();
    EXPECT_EQ(plain["sliding_window"], nullptr);
    EXPECT_EQ(plain["use_sliding_window"], false);
}

TEST(DrafterWindowConfig, BadLayoutsAreRefusedNamingTheKey) {
    const TargetConfig tc = test::tiny_target_config(true, 4);
    DrafterConfig d = test::tiny_drafter_config(tc, 3, 4);
    d.sliding_layers = {true, false, false};
    d.sliding_window = 16;
    nlohmann::json j = d.to_json();
    j["layer_types"] = {"sliding_attention", "full_attention"};
    EXPECT_TRUE(test::has(test::error_of([&] { DrafterConfig::from_json(j); }), "layer_types"));
    j = d.to_json();
    j["layer_types"][1] = "chunked_attention";
    EXPECT_TRUE(test::has(test::error_of([&] { DrafterConfig::from_json(j); }), "layer_types[1]"));
    j = d.to_json();
    j["sliding_window"] = 0;
    EXPECT_TRUE(
        test::has(test::error_of([&] { DrafterConfig::from_json(j); }), "sliding_window is 0"));
    // A DFlash drafter's sliding layers stay causal and its full ones bidirectional whatever
    // is_causal says (a bidirectional window is DFlash2's).
    j = d.to_json();
    j["is_causal"] = false;
    EXPECT_TRUE(DrafterConfig::from_json(j).layer_causal(0));
    j["is_causal"] = true;
    EXPECT_FALSE(DrafterConfig::from_json(j).layer_causal(1));

    // The drafter.* settings, as a run or `dflash init` applies them.
    train::DrafterOptions o;
    DrafterConfig c = test::tiny_drafter_config(tc, 3, 4);
    o.layer_types = {"sliding_attention", "full_attention"};
    o.sliding_window = 8;
    EXPECT_TRUE(test::has(test::error_of([&] { train::apply_attention_layout(o, c); }),
                          "drafter.layer_types has 2 entries but the drafter has 3 layers"));
    o.layer_types = {"sliding_attention", "full", "full_attention"};
    EXPECT_TRUE(test::has(test::error_of([&] { train::apply_attention_layout(o, c); }),
                          "drafter.layer_types[1] is 'full'"));
    o.layer_types = {"sliding_attention", "full_attention", "full_attention"};
    o.sliding_window = 0;
    EXPECT_TRUE(test::has(test::error_of([&] { train::apply_attention_layout(o, c); }),
                          "drafter.sliding_window is 0"));
    o.sliding_window = 8;
    train::apply_attention_layout(o, c);
    EXPECT_EQ(c.sliding_layers, (std::vector<bool>{true, false, false}));
    EXPECT_EQ(c.sliding_window, 8);
}

}  // namespace
}  // namespace dflash

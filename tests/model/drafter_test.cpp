// DFlash drafter: whole-model gradient check, the inference path (context cache + one block)
// against the training path (packed, block-sparse mask), and save/load.
#include <cmath>
#include <cstring>
#include <map>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "support/finite_diff.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

using Pair = test::TinyPair;
using test::random_tokens;

Pair make_pair(Backend& be, bool qwen3, uint64_t seed) {
    return test::tiny_pair(be, qwen3, seed);
}

HostTensor target_features(Backend& be, const Pair& p, const std::vector<int32_t>& toks) {
    Workspace ws = test::test_workspace(be);
    const auto& ids = p.drafter.config().target_layer_ids;
    HostTensor f({static_cast<int64_t>(toks.size()), p.drafter.feature_dim()});
    p.target.forward(be, ws, toks, ids, f, Tensor());
    return f;
}

class DrafterTest : public ::testing::TestWithParam<bool> {};

TEST_P(DrafterTest, InferencePathMatchesTrainingPath) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(*be, GetParam(), 21);
    const int64_t S = 17, B = p.drafter.block_size(), V = p.target.config().vocab_size;
    const auto toks = random_tokens(S, V, 2);
    HostTensor feats = target_features(*be, p, toks);
    const std::vector<int32_t> anchors = {0, 5, 9, 15};  // 15: the block runs past the sequence
    Workspace ws = test::test_workspace(*be);
    HostTensor hf({static_cast<int64_t>(anchors.size()) * B, p.drafter.dims().D});
    p.drafter.block_hidden(*be, ws, p.target.embed(), feats, toks, anchors, hf);
    HostTensor train_logits({hf.dim(0), V});
    be->gemm(hf, false, p.target.lm_head(), true, train_logits);

    for (size_t j = 0; j < anchors.size(); ++j) {
        const int64_t a = anchors[j];
        // Context fed in two pieces, as decoding would (prompt, then committed rows).
        DrafterSession s(p.drafter, *be, p.target.embed(), p.target.lm_head(), 64);
        HostTensor logits({B - 1, V});
        const int64_t cut = a / 2;
        if (cut > 0) {
            s.draft(feats.view().rows(0, cut), toks[cut], logits);
            EXPECT_EQ(s.context_length(), cut);
        }
        s.draft(feats.view().rows(cut, a), toks[a], logits);
        EXPECT_EQ(s.context_length(), a);
        const Tensor ref = train_logits.view().rows(j * B + 1, (j + 1) * B);
        EXPECT_LT(test::max_rel_diff(logits, ref), 1e-5) << "anchor " << a;
    }
}

TEST_P(DrafterTest, GradientMatchesFiniteDifferences) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(*be, GetParam(), 31);
    p.drafter.params().enable_training();
    const int64_t S = 14, V = p.target.config().vocab_size;
    const auto toks = random_tokens(S, V, 3);
    std::vector<uint8_t> mask(S, 1);
    mask[0] = mask[1] = mask[7] = 0;
    HostTensor feats = target_features(*be, p, toks);
    const std::vector<int32_t> anchors = {2, 6, 11};
    const double gamma = 3.0;
    auto loss = [&]() {
        return test::drafter_step(*be, p.drafter, p.target, feats, toks, mask, anchors, gamma, 1.0f,
                                  7)
            .loss_sum;
    };
    p.drafter.params().zero_grads();
    test::drafter_step(*be, p.drafter, p.target, feats, toks, mask, anchors, gamma, 1.0f, 7);
    test::expect_param_grads_match_fd(*be, p.drafter.params(), loss, 3, 3, 1e-4, 2e-3, 2e-2);
}

TEST_P(DrafterTest, LossIsDecayWeightedMeanAndStatsCountValidRows) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(*be, GetParam(), 41);
    const int64_t S = 12, V = p.target.config().vocab_size;
    const auto toks = random_tokens(S, V, 4);
    std::vector<uint8_t> mask(S, 1);
    mask[4] = 0;
    HostTensor feats = target_features(*be, p, toks);
    const std::vector<int32_t> anchors = {1, 9};
    const auto st =
        test::drafter_step(*be, p.drafter, p.target, feats, toks, mask, anchors, 2.0, 1.0f, 5);
    // Block at 1 covers positions 2,3,(4 masked); block at 9 covers 10, 11 (12 is past the end).
    EXPECT_EQ(st.count[0], 0);
    EXPECT_EQ(st.count[1], 2);
    EXPECT_EQ(st.count[2], 2);
    EXPECT_EQ(st.count[3], 0);
    const double w = 1.0 + std::exp(-0.5);
    EXPECT_NEAR(st.weight_sum, 2 * w, 1e-6);
    EXPECT_NEAR(p.drafter.weight_sum(mask, anchors, 2.0), st.weight_sum, 1e-6);
}

TEST_P(DrafterTest, SaveLoadRoundTrip) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(*be, GetParam(), 51);
    test::TempDir dir("drafter");
    p.drafter.save(dir.path(), DType::f32);
    DrafterModel back = DrafterModel::load(*be, dir.path());
    EXPECT_EQ(back.config().target_layer_ids, p.drafter.config().target_layer_ids);
    EXPECT_EQ(back.config().block_size, p.drafter.block_size());
    for (const auto& prm : p.drafter.params().params())
        EXPECT_EQ(test::max_abs_diff(back.params().value(prm.name), prm.value), 0.0) << prm.name;
}

// Without gradients (an evaluation's forward) a layer's activations are given back once the next
// layer has its input, as recomputation's forward does: the same loss bits as with gradients, and
// a workspace that grows by one hidden state a layer, not by a layer's activations (the trainer
// plans its workspace for evaluations too, so this is what keeps train.recompute_layers' saving).
TEST_P(DrafterTest, ForwardWithoutGradientsHoldsOneLayerAtATime) {
    auto be = make_cpu_backend(1);
    const TargetConfig tc = test::tiny_target_config(GetParam(), 4);
    const TargetModel target = TargetModel::random(*be, tc, 91, 0.3f);
    const int64_t S = 30, B = 4;
    const auto toks = random_tokens(S, tc.vocab_size, 92);
    const std::vector<uint8_t> mask(S, 1);
    const std::vector<int32_t> anchors = {1, 6, 13, 20, 27};
    const int64_t R = static_cast<int64_t>(anchors.size()) * B;
    // The planned workspace of one step of an L-layer drafter, with or without gradients; and
    // the step's stats.
    auto step = [&](int64_t layers, bool grads, HostTensor* stats_out) {
        DrafterModel d =
            DrafterModel::random(*be, test::tiny_drafter_config(tc, layers, B), 93, 0.3f);
        d.params().enable_training();
        d.params().set_grads_on(grads);
        const auto& ids = d.config().target_layer_ids;
        HostTensor feats({S, d.feature_dim()});
        Workspace fws = test::test_workspace(*be);
        target.forward(*be, fws, toks, ids, feats, Tensor());
        HostTensor stats({LossStatsLayout{B}.size()});
        const DrafterLossSpec spec{target.embed(), target.lm_head(), 3.0, 7};
        const size_t planned =
            plan_workspace(*be, [&](Backend& pb, Workspace& pws) {
                d.train_step(pb, pws, {feats, toks, mask, anchors}, spec, {1.0f, stats});
            }).device_bytes;
        if (stats_out != nullptr) {
            Workspace ws = test::test_workspace(*be);
            d.train_step(*be, ws, {feats, toks, mask, anchors}, spec, {1.0f, *stats_out});
        }
        return planned;
    };
    HostTensor with({LossStatsLayout{B}.size()}), without({LossStatsLayout{B}.size()});
    step(2, true, &with);
    const size_t eval2 = step(2, false, &without), eval4 = step(4, false, nullptr);
    EXPECT_EQ(std::memcmp(with.f32(), without.f32(), with.nbytes()), 0);
    // Two more layers: two more hidden states [R, D] (f32 on the CPU) and alignment, no more.
    const auto hidden = static_cast<size_t>(R * tc.hidden_size) * sizeof(float);
    EXPECT_LE(eval4 - eval2, 2 * hidden + 1024) << "eval plans " << eval2 << " and " << eval4;
}

INSTANTIATE_TEST_SUITE_P(Qwen3AndLlama, DrafterTest, ::testing::Values(true, false),
                         [](const auto& test_case) { return test_case.param ? "qwen3" : "llama"; });

}  // namespace
}  // namespace dflash

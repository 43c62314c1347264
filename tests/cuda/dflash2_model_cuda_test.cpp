// DFlash2 drafters on the CUDA backend against the CPU: one drafted block (the drafter's logits
// and the selector's input z) with the same bf16-representable weights; a training step's loss
// and gradients (the convolutions' backward in place), also with the selector's loss; greedy
// DFlash2 speculative decoding on CUDA equals plain greedy decoding on CUDA token for token, also
// with causal sliding-window layers whose window hides most of the context (the row-by-row
// attention path). Skips visibly without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backend/backend_factory.h"
#include "backend/workspace.h"
#include "cuda/elem_test_util.h"
#include "infer/spec_decode.h"
#include "model/candidate_selector.h"
#include "model/drafter.h"
#include "model/target.h"
#include "support/conditioning.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

// Head dim 64 (what the CUDA attention kernels take); D = 96 makes 6 groups of 16 channels.
TargetConfig gpu_config(int64_t vocab) {
    return test::gpu_target_config(vocab, 3);
}

struct Pair {
    TargetModel target;
    DrafterModel drafter;
};

Pair make_pair(Backend& be, uint64_t seed, int64_t block, int64_t vocab, DraftAttention att = {}) {
    const TargetConfig tc = gpu_config(vocab);
    DrafterConfig dc = test::tiny_dflash2_config(tc, 2, block, std::min<int64_t>(4, vocab - 1));
    dc.d2.conv_group_size = 16;
    dc.d2.selector_rank = 8;
    dc.sliding_layers.assign(2, att.window > 0);
    dc.sliding_window = att.window;
    dc.is_causal = att.causal ? 1 : 0;
    TargetModel t = TargetModel::random(be, tc, seed, 0.5f);
    DrafterModel d = DrafterModel::random(be, dc, seed + 1, 0.5f);
    test::randomize_dflash2_modules(d, seed + 2, 0.3f);
    return {std::move(t), std::move(d)};
}

using test::random_tokens;

class CudaDflash2 : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
        gpu_ = make_backend(DeviceKind::cuda, 0, 1);
        cpu_ = make_cpu_backend(1);
    }
    std::unique_ptr<Backend> gpu_, cpu_;
};

// One drafted block on a backend: the logits [B-1, V] and z [B-1, r] on the host.
struct Draft {
    HostTensor logits, z;
};
Draft draft_once(Backend& be, const Pair& p, const std::vector<int32_t>& toks) {
    const int64_t S = static_cast<int64_t>(toks.size()), B = p.drafter.block_size();
    const int64_t V = p.target.config().vocab_size;
    DeviceTensor feats(be, {S, p.drafter.feature_dim()}, be.compute_dtype());
    Workspace ws(be, WorkspacePlan{size_t{32} << 20, size_t{1} << 20, size_t{1} << 16});
    p.target.forward(be, ws, toks, p.drafter.config().target_layer_ids, feats, Tensor());
    DrafterSession s(p.drafter, be, p.target.embed(), p.target.lm_head(), 64);
    DeviceTensor logits(be, {B - 1, V}, DType::f32);
    s.draft(feats.view().rows(0, S - 1), toks[S - 1], logits);
    return {to_host_f32(be, logits), to_host_f32(be, s.selector_z(B))};
}

// bf16 weights and activations against the f32 reference: within 5% of the largest value.
// The bound: 5% of the largest value, or 4x how far the CPU's own float32 draft moves when every
// weight moves by one bf16 unit roundoff (support/conditioning.h), whichever is larger: the
// weights here have std 0.5, and the selector's z can be that sensitive.
TEST_F(CudaDflash2, DraftedBlockMatchesTheCpu) {
    Pair g = make_pair(*gpu_, 5, 6, 150);
    Pair c = make_pair(*cpu_, 5, 6, 150);
    c.target.params().copy_from(g.target.params());
    c.drafter.params().copy_from(g.drafter.params());
    const auto toks = random_tokens(23, 150, 4);
    const Draft a = draft_once(*cpu_, c, toks), b = draft_once(*gpu_, g, toks);
    double moved_logits = 0, moved_z = 0;
    for (const uint64_t seed : {11, 12}) {
        Pair m = make_pair(*cpu_, 5, 6, 150);
        m.target.params().copy_from(g.target.params());
        m.drafter.params().copy_from(g.drafter.params());
        test::perturb_relative(m.target.params(), seed, 1.0 / 256);
        test::perturb_relative(m.drafter.params(), seed + 100, 1.0 / 256);
        const Draft d = draft_once(*cpu_, m, toks);
        moved_logits = std::max(moved_logits, test::max_abs_diff(d.logits, a.logits));
        moved_z = std::max(moved_z, test::max_abs_diff(d.z, a.z));
    }
    const double logits_bound = std::max(0.05 * test::max_abs(a.logits), 4 * moved_logits);
    const double z_bound = std::max(0.05 * test::max_abs(a.z), 4 * moved_z);
    std::printf(
        "logits: CUDA %.3g, CPU moved %.3g, bound %.3g; z: CUDA %.3g, moved %.3g, bound "
        "%.3g (largest |z| %.3g)\n",
        test::max_abs_diff(b.logits, a.logits), moved_logits, logits_bound,
        test::max_abs_diff(b.z, a.z), moved_z, z_bound, test::max_abs(a.z));
    EXPECT_LT(test::max_abs_diff(b.logits, a.logits), logits_bound) << "logits";
    EXPECT_LT(test::max_abs_diff(b.z, a.z), z_bound) << "z";
}

// A CPU copy of the GPU pair g (made with the same seed): the same weights.
Pair cpu_twin(Backend& cpu, const Pair& g, uint64_t seed) {
    Pair c = make_pair(cpu, seed, g.drafter.block_size(), g.target.config().vocab_size);
    c.target.params().copy_from(g.target.params());
    c.drafter.params().copy_from(g.drafter.params());
    return c;
}

// One training step of p on be over toks: the flat gradients, the loss stats and (when
// selector_alpha >= 0) the selector's stats, with that alpha, on the host.
struct StepResult {
    HostTensor grads, stats, selector;
};
StepResult train_once(Backend& be, Pair& p, const std::vector<int32_t>& toks,
                      const std::vector<uint8_t>& mask, const std::vector<int32_t>& anchors,
                      double selector_alpha) {
    p.drafter.params().enable_training();
    p.drafter.params().zero_grads();
    const int64_t S = static_cast<int64_t>(toks.size()), B = p.drafter.block_size();
    DeviceTensor feats(be, {S, p.drafter.feature_dim()}, be.compute_dtype());
    Workspace ws(be, WorkspacePlan{size_t{64} << 20, size_t{1} << 20, size_t{1} << 16});
    p.target.forward(be, ws, toks, p.drafter.config().target_layer_ids, feats, Tensor());
    ws.reset();
    DeviceTensor stats(be, {LossStatsLayout{B}.size()}, DType::f32);
    DeviceTensor sstats(be, {SelectorStatsLayout{B}.size()}, DType::f32);
    be.fill(stats, 0.0f);
    be.fill(sstats, 0.0f);
    BlockObjective o;
    if (selector_alpha >= 0) {
        o.selector_stats = sstats;
        o.selector_alpha = selector_alpha;
    }
    p.drafter.train_step(be, ws, {feats, toks, mask, anchors},
                         {p.target.embed(), p.target.lm_head(), 4.0, 50}, {1.0f, stats}, o);
    return {to_host_f32(be, p.drafter.params().flat_grads()), to_host_f32(be, stats),
            to_host_f32(be, sstats)};
}

// The device's gradient within 1% of the CPU's in direction and 5% in size.
void expect_same_gradient(const HostTensor& ga, const HostTensor& gb) {
    double dot = 0, na = 0, nb = 0;
    for (int64_t i = 0; i < ga.numel(); ++i) {
        dot += double(ga.f32()[i]) * gb.f32()[i];
        na += double(ga.f32()[i]) * ga.f32()[i];
        nb += double(gb.f32()[i]) * gb.f32()[i];
    }
    EXPECT_GT(dot / std::sqrt(na * nb), 0.99);
    EXPECT_NEAR(std::sqrt(nb), std::sqrt(na), 0.05 * std::sqrt(na));
}

// The convolutions' backward on the device: the loss within 2%, the gradient as
// expect_same_gradient.
TEST_F(CudaDflash2, TrainingStepMatchesTheCpu) {
    Pair g = make_pair(*gpu_, 21, 8, 150), c = cpu_twin(*cpu_, g, 21);
    const auto toks = random_tokens(97, 150, 3);
    std::vector<uint8_t> mask(toks.size(), 1);
    mask[0] = mask[1] = 0;
    const std::vector<int32_t> anchors = {2, 9, 30, 31, 60, 88};
    const StepResult a = train_once(*cpu_, c, toks, mask, anchors, -1);
    const StepResult b = train_once(*gpu_, g, toks, mask, anchors, -1);
    auto loss = [](const HostTensor& st) {
        return double(st.f32()[LossStatsLayout::kLossSum]) / st.f32()[LossStatsLayout::kWeightSum];
    };
    EXPECT_NEAR(loss(b.stats), loss(a.stats), 0.02 * loss(a.stats));
    expect_same_gradient(a.grads, b.grads);
}

// The selector's loss on the device (train.selector_loss_alpha = 1, top-4 of 150, so most targets
// are injected): the selector loss within 2%, the row and block counts exact, recall within a
// couple of rows (bf16 logits may reorder near-ties at rank 4), and the whole gradient (backbone
// and selector) as expect_same_gradient.
TEST_F(CudaDflash2, TrainingStepWithTheSelectorLossMatchesTheCpu) {
    Pair g = make_pair(*gpu_, 23, 8, 150), c = cpu_twin(*cpu_, g, 23);
    const auto toks = random_tokens(97, 150, 5);
    std::vector<uint8_t> mask(toks.size(), 1);
    mask[0] = mask[1] = mask[40] = 0;
    const std::vector<int32_t> anchors = {2, 9, 30, 31, 60, 88, 91};
    const StepResult ra = train_once(*cpu_, c, toks, mask, anchors, 1.0);
    const StepResult rb = train_once(*gpu_, g, toks, mask, anchors, 1.0);
    const float* a = ra.selector.f32();
    const float* b = rb.selector.f32();
    EXPECT_GT(a[SelectorStatsLayout::kLossSum], 0.0f);
    EXPECT_NEAR(b[SelectorStatsLayout::kLossSum], a[SelectorStatsLayout::kLossSum],
                0.02 * a[SelectorStatsLayout::kLossSum]);
    EXPECT_EQ(b[SelectorStatsLayout::kRows], a[SelectorStatsLayout::kRows]);
    EXPECT_EQ(b[SelectorStatsLayout::kBlocks], a[SelectorStatsLayout::kBlocks]);
    EXPECT_LT(a[SelectorStatsLayout::kHits], a[SelectorStatsLayout::kRows]);
    EXPECT_NEAR(b[SelectorStatsLayout::kHits], a[SelectorStatsLayout::kHits], 2.0);
    expect_same_gradient(ra.grads, rb.grads);
}

void expect_lossless(const Pair& p, Backend& be, int64_t prompts, std::vector<int64_t>& hist) {
    SpeculativeEngine spec(p.target, &p.drafter, be);
    SpeculativeEngine plain(p.target, nullptr, be);
    for (int64_t i = 0; i < prompts; ++i) {
        const auto prompt = random_tokens(1 + (i * 7) % 12, p.target.config().vocab_size, 100 + i);
        GenerateOptions o;
        o.max_new_tokens = 5 + (i * 5) % 30;
        const auto a = plain.generate(prompt, o), b = spec.generate(prompt, o);
        ASSERT_EQ(a.tokens, b.tokens) << "prompt " << i;
        for (size_t k = 0; k < b.stats.accepted_hist.size(); ++k)
            hist[k] += b.stats.accepted_hist[k];
    }
}

TEST_F(CudaDflash2, GreedySpeculativeEqualsPlainDecoding) {
    Pair p = make_pair(*gpu_, 9, 6, 5);  // 5 tokens: partial acceptance is common
    std::vector<int64_t> hist(7, 0);
    expect_lossless(p, *gpu_, 24, hist);
    int64_t partial = 0;
    for (int k = 2; k < 6; ++k) partial += hist[k];
    EXPECT_GT(partial, 0);
    Pair w = make_pair(*gpu_, 10, 4, 37, DraftAttention{true, 5});
    std::vector<int64_t> hist2(5, 0);
    expect_lossless(w, *gpu_, 12, hist2);
}

}  // namespace
}  // namespace dflash

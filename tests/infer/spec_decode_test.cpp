// The speculative engine is lossless: greedy speculative output equals greedy target output token
// for token (random pairs, a drafter that is always right, one that is always wrong, prompts of
// length 1, every length), and under sampling the first tokens follow the target's distribution
// even for a deliberately bad drafter; the same on mixture-of-experts targets (Qwen3-MoE, and
// gpt-oss with sinks and a sliding window) and on the hybrid linear-attention targets (Qwen3.5,
// Qwen3-Next), whose rejected drafts are rolled back by checkpoint and replay.
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "backend/cpu/bf16_linear.h"
#include "config/registry.h"
#include "infer/spec_decode.h"
#include "model/tiny_hybrid_models.h"
#include "model/tiny_moe_models.h"
#include "support/spec_decode_checks.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

struct Pair {
    TargetModel target;
    DrafterModel drafter;
};

Pair make_pair(uint64_t seed, int64_t block, int64_t vocab = 37) {
    auto tc = test::tiny_target_config(true, 3);
    tc.vocab_size = vocab;
    TargetModel t = TargetModel::random(test::host_backend(), tc, seed, 0.5f);
    DrafterModel d = DrafterModel::random(test::host_backend(),
                                          test::tiny_drafter_config(tc, 1, block), seed + 1, 0.5f);
    return {std::move(t), std::move(d)};
}

// A DFlash2 pair whose convolutions and selector are random (not neutral); top_k candidates.
Pair make_dflash2_pair(uint64_t seed, int64_t block, int64_t vocab, int64_t top_k,
                       DraftAttention att = {}) {
    auto tc = test::tiny_target_config(true, 3);
    tc.vocab_size = vocab;
    TargetModel t = TargetModel::random(test::host_backend(), tc, seed, 0.5f);
    DrafterConfig dc = test::tiny_dflash2_config(tc, 2, block, top_k);
    dc.sliding_layers.assign(2, att.window > 0);
    dc.sliding_window = att.window;
    dc.is_causal = att.causal ? 1 : 0;
    DrafterModel d = DrafterModel::random(test::host_backend(), dc, seed + 1, 0.5f);
    test::randomize_dflash2_modules(d, seed + 2, 0.5f);
    return {std::move(t), std::move(d)};
}

using test::random_prompt;

// support/spec_decode_checks.h: greedy speculative output = plain greedy output.
void expect_lossless(const Pair& p, Backend& be, int64_t prompts, std::vector<int64_t>& hist,
                     DraftPrecision precision = DraftPrecision::f32) {
    test::expect_greedy_lossless(p.target, p.drafter, be, prompts, hist, precision);
}

TEST(SpecDecode, GreedyIsLosslessForRandomPair) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(7, 4);
    std::vector<int64_t> hist(5, 0);
    expect_lossless(p, *be, 24, hist);
    EXPECT_GT(hist[1], 0);  // blocks where no draft was accepted
}

TEST(SpecDecode, GreedyIsLosslessWhenEveryDraftIsAccepted) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(8, 5);
    // Zero final norms: all logits are 0, so the target and the drafter both pick token 0.
    fill_f32(p.target.params().value("model.norm.weight"), 0.0f);
    fill_f32(p.drafter.params().value("norm.weight"), 0.0f);
    std::vector<int64_t> hist(6, 0);
    expect_lossless(p, *be, 8, hist);
    for (int k = 1; k < 5; ++k) EXPECT_EQ(hist[k], 0) << k;
    EXPECT_GT(hist[5], 0);  // every block fully accepted: 4 drafts + bonus
}

TEST(SpecDecode, GreedyIsLosslessWithMixedAcceptance) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(9, 6, 5);  // a 5-token vocabulary makes partial matches common
    std::vector<int64_t> hist(7, 0);
    expect_lossless(p, *be, 30, hist);
    int64_t partial = 0;
    for (int k = 2; k < 6; ++k) partial += hist[k];
    EXPECT_GT(partial, 0);
}

// DFlash2: the selector's walk drafts; the output is still the target's own greedy output.
TEST(SpecDecode, Dflash2GreedyIsLossless) {
    auto be = make_cpu_backend(1);
    Pair p = make_dflash2_pair(13, 5, 6, 3);
    std::vector<int64_t> hist(6, 0);
    expect_lossless(p, *be, 24, hist);
    int64_t accepted = 0;
    for (int k = 2; k < 6; ++k) accepted += hist[k];
    EXPECT_GT(accepted, 0);
    EXPECT_GT(hist[1], 0);
}

// A causal drafter whose 4-key window hides most of the context: exercised row by row.
TEST(SpecDecode, Dflash2WithSlidingCausalLayersIsLossless) {
    auto be = make_cpu_backend(1);
    Pair p = make_dflash2_pair(14, 4, 6, 4, DraftAttention{true, 4});
    std::vector<int64_t> hist(5, 0);
    expect_lossless(p, *be, 12, hist);
}

// A DFlash drafter with a sliding layer (window 3, far below the context) and a full one: its
// bounded draft KV (Note [Bounded draft KV]) moves its rows many times; the output is still the
// target's own greedy output.
TEST(SpecDecode, DflashWithSlidingWindowLayerIsLossless) {
    auto be = make_cpu_backend(1);
    auto tc = test::tiny_target_config(true, 3);
    tc.vocab_size = 5;
    TargetModel t = TargetModel::random(test::host_backend(), tc, 15, 0.5f);
    DrafterConfig dc = test::tiny_drafter_config(tc, 2, 5);
    dc.sliding_layers = {true, false};
    dc.sliding_window = 3;
    Pair p{std::move(t), DrafterModel::random(test::host_backend(), dc, 16, 0.5f)};
    std::vector<int64_t> hist(6, 0);
    expect_lossless(p, *be, 30, hist);
    int64_t accepted = 0;
    for (int k = 2; k < 6; ++k) accepted += hist[k];
    EXPECT_GT(accepted, 0);
}

// Drafting in bf16 (Note [bf16 drafting]) changes what is proposed, never the output; where the
// CPU has no AVX-512, auto drafts in f32 and bf16 is refused naming the
// setting.
TEST(SpecDecode, Bf16DraftingIsLosslessOrRefusedWithoutBf16Kernels) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(21, 5);
    Pair p2 = make_dflash2_pair(22, 5, 6, 3);
    SpeculativeEngine probe(p.target, &p.drafter, *be);
    GenerateOptions o;
    o.max_new_tokens = 4;
    probe.generate(random_prompt(3, 37, 1), o);
    EXPECT_EQ(probe.draft_precision(), "f32");
    o.draft_precision = DraftPrecision::auto_;
    probe.generate(random_prompt(3, 37, 1), o);
    if (cpu::best_bf16_kernel() == cpu::Bf16Kernel::portable) {
        EXPECT_EQ(probe.draft_precision(), "f32");
        o.draft_precision = DraftPrecision::bf16;
        EXPECT_TRUE(test::has(test::error_of([&] { probe.generate(random_prompt(3, 37, 1), o); }),
                              "infer.cpu_draft_precision = bf16"));
        return;
    }
    EXPECT_EQ(probe.draft_precision(), "bf16 copies");
    for (const Pair* pair : {&p, &p2}) {
        std::vector<int64_t> hist(6, 0);
        expect_lossless(*pair, *be, 16, hist, DraftPrecision::bf16);
        int64_t accepted = 0;
        for (int k = 2; k < 6; ++k) accepted += hist[k];
        EXPECT_GT(accepted, 0);
    }
}

// A bf16 draft is the f32 draft to within bf16's rounding: the logits of the same block from
// the same context, with and without the drafter's bf16 copies.
TEST(SpecDecode, Bf16DraftsAreCloseToF32Drafts) {
    if (cpu::best_bf16_kernel() == cpu::Bf16Kernel::portable)
        GTEST_SKIP() << "no AVX-512 on this CPU: no bf16 copies";
    auto be = make_cpu_backend(1);
    Pair p = make_pair(23, 6);
    std::vector<Tensor> weights = p.drafter.linear_weights();
    weights.push_back(p.target.lm_head());
    const PreparedWeights copies(*be, weights);
    ASSERT_EQ(copies.count(), weights.size());
    const int64_t T = 9, B = 6, V = p.target.config().vocab_size;
    HostTensor feats({T, p.drafter.feature_dim()});
    Rng rng(4);
    for (int64_t i = 0; i < feats.numel(); ++i) feats.f32()[i] = rng.normal();
    HostTensor f32_logits({B - 1, V}), bf16_logits({B - 1, V});
    DrafterSession exact(p.drafter, *be, p.target.embed(), p.target.lm_head(), 32, B);
    DrafterSession narrow(p.drafter, *be, p.target.embed(), p.target.lm_head(), 32, B, 0, &copies);
    exact.draft(feats.view(), 3, f32_logits.view());
    narrow.draft(feats.view(), 3, bf16_logits.view());
    double max_abs = 0, max_diff = 0;
    int64_t same_argmax = 0;
    for (int64_t r = 0; r < B - 1; ++r) {
        int64_t a = 0, b = 0;
        for (int64_t v = 0; v < V; ++v) {
            const float x = f32_logits.f32()[r * V + v], y = bf16_logits.f32()[r * V + v];
            max_abs = std::max(max_abs, std::fabs(static_cast<double>(x)));
            max_diff = std::max(max_diff, std::fabs(static_cast<double>(x) - y));
            if (x > f32_logits.f32()[r * V + a]) a = v;
            if (y > bf16_logits.f32()[r * V + b]) b = v;
        }
        same_argmax += a == b;
    }
    EXPECT_GT(max_diff, 0.0);             // the copies were used
    EXPECT_LT(max_diff, 0.03 * max_abs);  // bf16 rounding, not another computation
    EXPECT_GE(same_argmax, B - 2);
}

// --trace's records: one per step, accepted + 1 tokens committed each, the next token committed
// last, and the accepted histogram counts them.
TEST(SpecDecode, TraceAgreesWithAcceptanceCounts) {
    auto be = make_cpu_backend(1);
    for (const bool v2 : {false, true}) {
        Pair p = v2 ? make_dflash2_pair(15, 5, 6, 3) : make_pair(15, 5, 6);
        SpeculativeEngine spec(p.target, &p.drafter, *be);
        GenerateOptions o;
        o.max_new_tokens = 60;
        std::vector<StepTrace> steps;
        std::vector<std::vector<int32_t>> drafted;
        o.trace = [&](const StepTrace& t) {
            steps.push_back(t);
            drafted.emplace_back(t.drafted.begin(), t.drafted.end());
        };
        const auto r = spec.generate(random_prompt(5, 6, 3), o);
        ASSERT_EQ(static_cast<int64_t>(steps.size()), r.stats.steps);
        std::vector<int64_t> hist(6, 0);
        std::vector<int32_t> replay = {r.tokens[0]};  // the prefill's token
        for (size_t s = 0; s < steps.size(); ++s) {
            EXPECT_EQ(steps[s].step, static_cast<int64_t>(s));
            ASSERT_EQ(drafted[s].size(), 4u);
            hist[steps[s].accepted + 1] += 1;
            replay.insert(replay.end(), drafted[s].begin(), drafted[s].begin() + steps[s].accepted);
            replay.push_back(steps[s].next);
        }
        EXPECT_EQ(hist, r.stats.accepted_hist) << (v2 ? "dflash2" : "dflash");
        // accept_hist counts what each step committed: the same but for a last step cut short
        // by the budget, and its mean is tau.
        int64_t committed = 0;
        for (size_t n = 0; n < r.stats.accept_hist.size(); ++n)
            committed += static_cast<int64_t>(n) * r.stats.accept_hist[n];
        EXPECT_EQ(committed, r.stats.new_tokens - 1);
        EXPECT_GE(r.stats.tau_accepted(), r.stats.tau());
        replay.resize(std::min(replay.size(), r.tokens.size()));
        EXPECT_EQ(replay, r.tokens);
    }
}

TEST(SpecDecode, StopTokensBudgetsAndBadInput) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(10, 4);
    SpeculativeEngine spec(p.target, &p.drafter, *be);
    SpeculativeEngine plain(p.target, nullptr, *be);
    const auto prompt = random_prompt(3, 37, 1);
    GenerateOptions o;
    o.max_new_tokens = 40;
    const auto full = plain.generate(prompt, o).tokens;
    // Stop at the token generated 6th: both engines end right after it.
    o.stop_tokens = {full[5]};
    const auto a = plain.generate(prompt, o), b = spec.generate(prompt, o);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(b.stop, StopReason::stop_token);
    EXPECT_EQ(b.tokens.back(), full[5]);
    EXPECT_THROW(spec.generate({}, o), Error);
    // A context that ends before the budget: generation stops at the context, losslessly.
    o.stop_tokens.clear();
    o.max_context = 12;
    const auto c = plain.generate(prompt, o), d = spec.generate(prompt, o);
    EXPECT_EQ(c.tokens, d.tokens);
    EXPECT_EQ(static_cast<int64_t>(d.tokens.size()), 9);
    EXPECT_EQ(d.stop, StopReason::context_full);
    o.max_context = 3;
    // The prompt fills the context: the error names the setting that raises it, which exists.
    const std::string msg = test::error_of([&] { spec.generate(prompt, o); });
    EXPECT_NE(msg.find("infer.max_context"), std::string::npos) << msg;
    EXPECT_NE(config::make_registry().find("infer.max_context"), nullptr);
}

// Speculative sampling at temperature 1.3 on a vocabulary of 4 (64 outcomes for 3 tokens): the
// first 3 generated tokens follow the target's exact distribution (chi-square, 0.1%;
// support/spec_decode_checks.h).
void expect_first_tokens_follow_target(const Pair& p, bool draft_sampling) {
    auto be = make_cpu_backend(1);
    test::expect_first_tokens_follow_target(p.target, p.drafter, *be, draft_sampling);
}

// (DFlash2 drafter, sampled drafts)
class SpecSampling : public ::testing::TestWithParam<std::pair<bool, bool>> {};

TEST_P(SpecSampling, FirstTokensFollowTargetDistribution) {
    // DFlash2 keeps 3 candidates per slot, so the residual must put back the mass of the token it
    // never proposes.
    const Pair p = GetParam().first ? make_dflash2_pair(12, 4, 4, 3) : make_pair(12, 4, 4);
    expect_first_tokens_follow_target(p, GetParam().second);
}

INSTANTIATE_TEST_SUITE_P(GreedyAndSampledDrafts, SpecSampling,
                         ::testing::Values(std::pair{false, false}, std::pair{false, true},
                                           std::pair{true, false}, std::pair{true, true}),
                         [](const auto& test_case) {
                             return std::string(test_case.param.first ? "dflash2_" : "dflash_") +
                                    (test_case.param.second ? "sampled" : "greedy");
                         });

// Mixture-of-experts targets (issue 24): routing, sinks and sliding windows (gpt-oss: window 3,
// shorter than most prompts) keep speculative decoding lossless, greedy and sampled.
Pair make_moe_pair(bool gpt_oss, uint64_t seed, int64_t block, int64_t vocab) {
    TargetConfig tc = gpt_oss ? test::tiny_gpt_oss_config() : test::tiny_qwen3_moe_config(false);
    tc.vocab_size = vocab;
    TargetModel t = TargetModel::random(test::host_backend(), tc, seed, 0.5f);
    DrafterModel d = DrafterModel::random(test::host_backend(),
                                          test::tiny_drafter_config(tc, 1, block), seed + 1, 0.5f);
    return {std::move(t), std::move(d)};
}

class MoeSpecDecode : public ::testing::TestWithParam<bool> {};

TEST_P(MoeSpecDecode, GreedyIsLosslessWithMixedAcceptance) {
    auto be = make_cpu_backend(1);
    const Pair p = make_moe_pair(GetParam(), 9, 6, 5);
    std::vector<int64_t> hist(7, 0);
    expect_lossless(p, *be, 30, hist);
    int64_t partial = 0;
    for (int k = 2; k < 6; ++k) partial += hist[k];
    EXPECT_GT(hist[1], 0);  // no draft accepted
    EXPECT_GT(partial, 0);
}

TEST_P(MoeSpecDecode, SampledTokensFollowTheTarget) {
    expect_first_tokens_follow_target(make_moe_pair(GetParam(), 12, 4, 4), true);
}

INSTANTIATE_TEST_SUITE_P(Families, MoeSpecDecode, ::testing::Values(false, true),
                         [](const auto& test_case) {
                             return std::string(test_case.param ? "gpt_oss" : "qwen3_moe");
                         });

// Hybrid linear-attention targets (issue 25): every rejected draft rolls the Gated DeltaNet
// states back (TargetSession::crop: checkpoint + replay), so any error in that shows up as a
// token that differs from plain decoding. Every accepted length 0 .. block-1 is forced by a
// 3-token vocabulary (a draft matches about one time in three, so all lengths occur over 80
// prompts; the fixed seeds make it the same run every time); full acceptance by zeroing lm_head
// (every logit 0: target and drafter both pick token 0).
Pair make_hybrid_pair(bool next, uint64_t seed, int64_t block, int64_t vocab) {
    TargetConfig tc = next ? test::tiny_qwen3_next_config() : test::tiny_qwen3_5_config();
    tc.vocab_size = vocab;
    TargetModel t = TargetModel::random(test::host_backend(), tc, seed, 0.5f);
    DrafterModel d = DrafterModel::random(test::host_backend(),
                                          test::tiny_drafter_config(tc, 1, block), seed + 1, 0.5f);
    return {std::move(t), std::move(d)};
}

class HybridSpecDecode : public ::testing::TestWithParam<bool> {};

TEST_P(HybridSpecDecode, GreedyIsLosslessAtEveryAcceptedLength) {
    auto be = make_cpu_backend(1);
    const int64_t block = 5;
    const Pair p = make_hybrid_pair(GetParam(), 9, block, 3);
    std::vector<int64_t> hist(block + 1, 0);
    expect_lossless(p, *be, 80, hist);
    test::expect_every_accepted_length(hist, GetParam() ? "qwen3_next" : "qwen3_5");
}

TEST_P(HybridSpecDecode, GreedyIsLosslessWhenEveryDraftIsAccepted) {
    auto be = make_cpu_backend(1);
    Pair p = make_hybrid_pair(GetParam(), 8, 5, 37);
    test::expect_lossless_when_every_draft_is_accepted(p.target, p.drafter, *be,
                                                       GetParam() ? "qwen3_next" : "qwen3_5");
}

TEST_P(HybridSpecDecode, SampledTokensFollowTheTarget) {
    expect_first_tokens_follow_target(make_hybrid_pair(GetParam(), 12, 4, 4), true);
}

INSTANTIATE_TEST_SUITE_P(Families, HybridSpecDecode, ::testing::Values(false, true),
                         [](const auto& test_case) {
                             return std::string(test_case.param ? "qwen3_next" : "qwen3_5");
                         });

}  // namespace
}  // namespace dflash

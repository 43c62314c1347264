// Speculative decoding with DSpark drafters (docs/speculative-sampling.md "DSpark drafters"): every
// slot drafts (B drafts, B + 1 verified tokens), the Markov bias is added slot by slot once the
// previous draft is chosen, and sampled drafts hand the acceptance rule the very distribution they
// were drawn from. So greedy output equals the target's own greedy output token for token (vanilla,
// gated and rnn heads, and drafters with a sliding-window layer), the first sampled tokens follow
// the target's distribution (chi-square), and a confidence cut sends fewer drafts to the target
// without changing the output.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "infer/bench.h"
#include "infer/spec_decode.h"
#include "support/spec_decode_checks.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

struct Pair {
    TargetModel target;
    DrafterModel drafter;
};

// A tiny target and a one-layer DSpark drafter of rank 3, its heads N(0, 1) so the bias matters.
Pair make_dspark_pair(uint64_t seed, int64_t block, int64_t vocab,
                      MarkovHeadType head = MarkovHeadType::gated, int64_t window = 0) {
    auto tc = test::tiny_target_config(true, 3);
    tc.vocab_size = vocab;
    TargetModel t = TargetModel::random(test::host_backend(), tc, seed, 0.5f);
    DrafterConfig dc = test::tiny_drafter_config(tc, 1, block);
    dc.arch = DrafterArch::dspark;
    dc.ds.markov_rank = 3;
    dc.ds.markov_head = head;
    // A sliding-window layer (causal, docs/training.md "Sliding-window drafter layers").
    dc.sliding_layers.assign(1, window > 0);
    dc.sliding_window = window;
    DrafterModel d = DrafterModel::random(test::host_backend(), dc, seed + 1, 0.5f);
    Rng rng(seed + 2);
    for (const auto& prm : d.params().params()) {
        if (!prm.name.starts_with("markov_head.") && !prm.name.starts_with("confidence_head."))
            continue;
        HostTensor h(prm.shape);
        fill_normal(rng, h.f32(), h.numel(), 1.0f);
        d.params().write_f32(prm.name, h.view());
    }
    return {std::move(t), std::move(d)};
}

using test::random_prompt;

TEST(DsparkDecode, GreedyIsLossless) {
    auto be = make_cpu_backend(1);
    for (const auto& [head, window] :
         {std::pair{MarkovHeadType::vanilla, int64_t{0}},
          std::pair{MarkovHeadType::gated, int64_t{0}},
          std::pair{MarkovHeadType::gated, int64_t{3}}, std::pair{MarkovHeadType::rnn, int64_t{0}},
          std::pair{MarkovHeadType::rnn, int64_t{3}}}) {
        const Pair p = make_dspark_pair(9, 5, 4, head, window);
        SpeculativeEngine spec(p.target, &p.drafter, *be);
        SpeculativeEngine plain(p.target, nullptr, *be);
        std::vector<int64_t> hist(7, 0);  // 5 drafts: a step verifies 6 tokens
        for (int64_t i = 0; i < 30; ++i) {
            const auto prompt = random_prompt(1 + (i * 7) % 12, 4, 100 + i);
            GenerateOptions o;
            o.max_new_tokens = 5 + (i * 5) % 30;
            const auto a = plain.generate(prompt, o);
            const auto b = spec.generate(prompt, o);
            ASSERT_EQ(a.tokens, b.tokens) << "prompt " << i;
            ASSERT_EQ(b.stats.accepted_hist.size(), hist.size());
            for (size_t k = 0; k < hist.size(); ++k) hist[k] += b.stats.accepted_hist[k];
            EXPECT_EQ(b.stats.drafted, 5 * b.stats.steps);
        }
        int64_t partial = 0;
        for (int k = 2; k < 7; ++k) partial += hist[k];
        EXPECT_GT(hist[1], 0);  // steps where no draft was accepted
        EXPECT_GT(partial, 0);  // and steps where some were
    }
}

// infer.dspark_confidence_threshold: the higher the threshold, the fewer drafts go to the target;
// the output stays the target's own at every threshold.
TEST(DsparkDecode, ConfidenceCutVerifiesFewerAndStaysLossless) {
    auto be = make_cpu_backend(1);
    const Pair p = make_dspark_pair(10, 5, 5);
    SpeculativeEngine spec(p.target, &p.drafter, *be);
    SpeculativeEngine plain(p.target, nullptr, *be);
    std::vector<int64_t> verified;
    for (const double threshold : {0.0, 0.01, 0.5, 0.99}) {
        int64_t drafted = 0, sent = 0;
        for (int64_t i = 0; i < 12; ++i) {
            const auto prompt = random_prompt(1 + i % 5, 5, 300 + i);
            GenerateOptions o;
            o.max_new_tokens = 20;
            const auto a = plain.generate(prompt, o);
            o.confidence_threshold = threshold;
            const auto b = spec.generate(prompt, o);
            ASSERT_EQ(a.tokens, b.tokens) << "prompt " << i << " threshold " << threshold;
            drafted += b.stats.drafted;
            sent += b.stats.verified;
        }
        if (threshold == 0.0) {
            EXPECT_EQ(sent, drafted);  // no threshold: every draft verified
        }
        EXPECT_LE(sent, drafted);
        verified.push_back(sent);
    }
    EXPECT_LT(verified.back(), verified.front()) << verified[1] << ", " << verified[2];
    // A DFlash drafter has no confidence to cut with.
    GenerateOptions o;
    auto tc = test::tiny_target_config(true, 3);
    const TargetModel t = TargetModel::random(test::host_backend(), tc, 3, 0.5f);
    const DrafterModel v1 =
        DrafterModel::random(test::host_backend(), test::tiny_drafter_config(tc, 1, 4), 4, 0.5f);
    SpeculativeEngine dflash(t, &v1, *be);
    o.confidence_threshold = 0.5;
    EXPECT_TRUE(test::has(test::error_of([&] { dflash.generate(std::vector<int32_t>{1}, o); }),
                          "needs a DSpark drafter"));
}

// `dflash bench` reports what a confidence cut did: the drafts verified of those drafted, in its
// table, its JSON and its recorded steps, and the outputs stay lossless.
TEST(DsparkDecode, BenchReportsTheConfidenceCut) {
    auto be = make_cpu_backend(1);
    const Pair p = make_dspark_pair(10, 5, 5);
    std::vector<Prompt> prompts;
    for (int64_t i = 0; i < 3; ++i) {
        Prompt q;
        q.tokens = random_prompt(2 + i, 5, 400 + i);
        q.label = "p" + std::to_string(i);
        prompts.push_back(std::move(q));
    }
    GenerateOptions opt;
    opt.max_new_tokens = 16;
    opt.confidence_threshold = 0.99;
    const BenchReport r = run_bench(p.target, p.drafter, *be, prompts, opt, Logger(), true);
    EXPECT_TRUE(r.lossless());
    EXPECT_LT(r.total.verified, r.total.drafted);
    // The block is the drafter's (5); a DSpark step commits up to B + 1 tokens (B drafts).
    EXPECT_EQ(r.block_size, 5);
    EXPECT_EQ(r.max_step_tokens, 6);
    // The recorded steps (bench --json-steps) hold the verified drafts only: B or fewer a step,
    // as many as the cut let through in all.
    for (const BenchRequest& q : r.requests) {
        int64_t verified = 0;
        for (const BenchStep& st : q.steps) {
            EXPECT_LE(st.drafted.size(), 5u);
            EXPECT_LE(st.accepted, static_cast<int64_t>(st.drafted.size()));
            verified += static_cast<int64_t>(st.drafted.size());
        }
        EXPECT_EQ(verified, q.speculative.verified) << q.label;
        EXPECT_EQ(static_cast<int64_t>(q.steps.size()), q.speculative.steps) << q.label;
    }
    const std::string table = format_bench_table(r);
    EXPECT_TRUE(test::has(table, "confidence cut: " + std::to_string(r.total.verified) + " of " +
                                     std::to_string(r.total.drafted) + " drafts verified"))
        << table;
    EXPECT_TRUE(test::has(table, "block size 5 (at most 6 tokens a step)")) << table;
    const auto j = bench_to_json(r);
    EXPECT_EQ(j["block_size"], 5);
    EXPECT_EQ(j["max_step_tokens"], 6);
    EXPECT_EQ(j["total"]["verified"], r.total.verified);
    EXPECT_EQ(j["requests"][0]["speculative"]["drafted"], r.requests[0].speculative.drafted);
}

// Speculative sampling at temperature 1.3 on a vocabulary of 4 (64 outcomes for 3 tokens): the
// first 3 generated tokens follow the target's exact distribution (chi-square, 0.1%), with greedy
// drafts and with drafts sampled from the Markov-corrected distribution, for the gated head and
// the rnn head (whose bias at a slot depends on every earlier draft of the block).
struct SamplingCase {
    MarkovHeadType head;
    bool draft_sampling;
};
class DsparkSampling : public ::testing::TestWithParam<SamplingCase> {};

TEST_P(DsparkSampling, FirstTokensFollowTheTarget) {
    const Pair p = make_dspark_pair(12, 4, 4, GetParam().head);
    auto be = make_cpu_backend(1);
    test::expect_first_tokens_follow_target(p.target, p.drafter, *be, GetParam().draft_sampling);
}

INSTANTIATE_TEST_SUITE_P(Drafts, DsparkSampling,
                         ::testing::Values(SamplingCase{MarkovHeadType::gated, false},
                                           SamplingCase{MarkovHeadType::gated, true},
                                           SamplingCase{MarkovHeadType::rnn, false},
                                           SamplingCase{MarkovHeadType::rnn, true}),
                         [](const auto& test_case) {
                             const SamplingCase& c = test_case.param;
                             return std::string(markov_head_type_name(c.head)) +
                                    (c.draft_sampling ? "_sampled" : "_greedy");
                         });

}  // namespace
}  // namespace dflash

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

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab));
    return t;
}

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
// table and its JSON, and the outputs stay lossless.
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
    const BenchReport r = run_bench(p.target, p.drafter, *be, prompts, opt, Logger());
    EXPECT_TRUE(r.lossless());
    EXPECT_LT(r.total.verified, r.total.drafted);
    const std::string table = format_bench_table(r);
    EXPECT_TRUE(test::has(table, "confidence cut: " + std::to_string(r.total.verified) + " of " +
                                     std::to_string(r.total.drafted) + " drafts verified"))
        << table;
    const auto j = bench_to_json(r);
    EXPECT_EQ(j["total"]["verified"], r.total.verified);
    EXPECT_EQ(j["requests"][0]["speculative"]["drafted"], r.requests[0].speculative.drafted);
}

// Exact distribution of the first 3 generated tokens under the target's sampling distribution.
std::vector<double> exact_three(const TargetModel& t, Backend& be,
                                const std::vector<int32_t>& prompt, const SampleParams& sp) {
    const int64_t V = t.config().vocab_size;
    std::vector<double> out(V * V * V, 0.0);
    auto probs_after = [&](const std::vector<int32_t>& seq) {
        TargetSession s(t, be, 32, {}, 8);
        HostTensor l({static_cast<int64_t>(seq.size()), V});
        s.forward(seq, l, Tensor());
        return sampling_probs(std::span(l.f32() + (seq.size() - 1) * V, V), sp);
    };
    const auto p1 = probs_after(prompt);
    for (int64_t a = 0; a < V; ++a) {
        auto s1 = prompt;
        s1.push_back(static_cast<int32_t>(a));
        const auto p2 = probs_after(s1);
        for (int64_t b = 0; b < V; ++b) {
            auto s2 = s1;
            s2.push_back(static_cast<int32_t>(b));
            const auto p3 = probs_after(s2);
            for (int64_t c = 0; c < V; ++c) out[(a * V + b) * V + c] = p1[a] * p2[b] * p3[c];
        }
    }
    return out;
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
    SpeculativeEngine spec(p.target, &p.drafter, *be);
    const std::vector<int32_t> prompt = {1, 3, 2};
    GenerateOptions o;
    o.max_new_tokens = 3;
    o.sampling.temperature = 1.3f;
    o.draft_sampling = GetParam().draft_sampling;
    const auto exact = exact_three(p.target, *be, prompt, o.sampling);
    const int64_t n = 12000;
    std::vector<int64_t> counts(exact.size(), 0);
    for (int64_t i = 0; i < n; ++i) {
        o.seed = 1000 + i;
        const auto r = spec.generate(prompt, o);
        ASSERT_EQ(r.tokens.size(), 3u);
        counts[(r.tokens[0] * 4 + r.tokens[1]) * 4 + r.tokens[2]] += 1;
    }
    // Pool cells with expected count < 5 into one, then chi-square at 0.1% significance.
    double chi = 0, pooled_e = 0, pooled_o = 0;
    int cells = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
        const double e = exact[i] * n;
        if (e < 5) {
            pooled_e += e;
            pooled_o += counts[i];
            continue;
        }
        chi += (counts[i] - e) * (counts[i] - e) / e;
        ++cells;
    }
    if (pooled_e > 0) {
        chi += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        ++cells;
    }
    // Critical value of chi-square at 0.1% for (cells - 1) dof, Wilson-Hilferty approximation.
    const double k = cells - 1, z = 3.09;
    const double crit = k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
    EXPECT_LT(chi, crit) << cells << " cells";
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

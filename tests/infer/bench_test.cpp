// The benchmark on a tiny random target + drafter pair: per-request and total fields agree with
// each other (histograms sum to steps, tau = (new_tokens - 1) / steps = the committed histogram's
// mean, a last step cut by the budget counted as committed (the reference decoder's count); totals
// are the sums of the per-prompt figures; speed-up and prediction are pinned on hand-made totals
// with known answers), greedy runs are lossless, a baseline of a different target is caught at the
// first differing position, and the table / JSON carry every figure.
#include "infer/bench.h"

#include <cmath>
#include <numeric>

#include "config/registry.h"
#include "config/settings.h"
#include "options/infer_options.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

struct Pair {
    TargetModel target;
    DrafterModel drafter;
};

Pair make_pair(uint64_t seed, int64_t block = 4) {
    const auto tc = test::tiny_target_config(true, 3);
    return {TargetModel::random(test::host_backend(), tc, seed, 0.5f),
            DrafterModel::random(test::host_backend(), test::tiny_drafter_config(tc, 1, block),
                                 seed + 1, 0.5f)};
}

std::vector<Prompt> make_prompts(int64_t n, int64_t vocab) {
    Rng rng(11);
    std::vector<Prompt> out;
    for (int64_t i = 0; i < n; ++i) {
        Prompt p;
        p.tokens.resize(1 + (i * 5) % 9);
        for (auto& t : p.tokens) t = static_cast<int32_t>(rng.below(vocab));
        p.label = fmt::format("p{}", i);
        out.push_back(std::move(p));
    }
    return out;
}

int64_t sum(const std::vector<int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), 0LL);
}

TEST(Bench, ReportFieldsAreConsistentAndGreedyIsLossless) {
    auto be = make_cpu_backend(1);
    const Pair p = make_pair(3);
    const auto prompts = make_prompts(5, p.target.config().vocab_size);
    GenerateOptions opt;
    opt.max_new_tokens = 24;
    opt.stop_tokens = {5};  // a random model hits it now and then: outputs of varied length
    const BenchReport r = run_bench(p.target, p.drafter, *be, prompts, opt, Logger());

    EXPECT_EQ(r.block_size, 4);
    EXPECT_TRUE(r.greedy);
    EXPECT_TRUE(r.lossless());
    ASSERT_EQ(r.requests.size(), prompts.size());
    int64_t new_tokens = 0, steps = 0, prompt_tokens = 0;
    double baseline_decode_s = 0, speculative_decode_s = 0, draft_verify_s = 0;
    std::vector<int64_t> hist(5, 0);
    int64_t stepped = 0;  // requests that took speculative steps
    for (size_t i = 0; i < r.requests.size(); ++i) {
        const BenchRequest& q = r.requests[i];
        const GenerateStats& a = q.baseline;
        const GenerateStats& b = q.speculative;
        EXPECT_EQ(q.label, prompts[i].label);
        EXPECT_EQ(q.prompt_tokens, static_cast<int64_t>(prompts[i].tokens.size()));
        EXPECT_TRUE(q.outputs_match);
        EXPECT_EQ(a.new_tokens, b.new_tokens) << i;  // lossless => same output length
        EXPECT_EQ(a.steps, a.new_tokens - 1);        // plain decoding: one token per step
        ASSERT_EQ(b.accept_hist.size(), 5u);
        EXPECT_EQ(b.accept_hist[0], 0);
        EXPECT_EQ(sum(b.accept_hist), b.steps) << i;
        EXPECT_EQ(sum(b.accepted_hist), b.steps) << i;
        int64_t committed = 0;
        for (int64_t n = 0; n < 5; ++n) committed += n * b.accept_hist[n];
        EXPECT_EQ(committed, b.new_tokens - 1) << i;
        // A request whose first token (the prefill's) is the stop token takes no step at all.
        if (b.steps > 0) {
            ++stepped;
            EXPECT_NEAR(b.tau(), static_cast<double>(b.new_tokens - 1) / b.steps, 1e-12);
            EXPECT_GE(b.tau(), 1.0);
            EXPECT_LE(b.tau(), 4.0);
            EXPECT_GT(b.draft_s, 0.0);
            EXPECT_GT(b.verify_s, 0.0);
        } else {
            EXPECT_EQ(b.new_tokens, 1) << i;
        }
        EXPECT_LE(b.draft_s + b.verify_s, b.decode_s * 1.0001);
        new_tokens += b.new_tokens;
        steps += b.steps;
        baseline_decode_s += a.decode_s;
        speculative_decode_s += b.decode_s;
        draft_verify_s += b.draft_s + b.verify_s;
        prompt_tokens += q.prompt_tokens;
        for (int k = 0; k < 5; ++k) hist[k] += b.accept_hist[k];
    }
    EXPECT_GE(stepped, 3);  // most outputs are longer than one token
    const BenchTotals& t = r.total;
    EXPECT_EQ(t.requests, 5);
    EXPECT_EQ(t.prompt_tokens, prompt_tokens);
    EXPECT_EQ(t.speculative_new_tokens, new_tokens);
    EXPECT_EQ(t.speculative_steps, steps);
    EXPECT_EQ(t.accept_hist, hist);
    EXPECT_EQ(sum(t.accept_hist), t.speculative_steps);
    EXPECT_NEAR(t.tau(), static_cast<double>(new_tokens - 5) / steps, 1e-12);
    // The totals are the sums of the per-prompt figures (the formulas on top of them are pinned
    // by FiguresFollowFromKnownTotals).
    EXPECT_NEAR(t.baseline_decode_s, baseline_decode_s, 1e-9);
    EXPECT_NEAR(t.speculative_decode_s, speculative_decode_s, 1e-9);
    EXPECT_NEAR(t.draft_s + t.verify_s, draft_verify_s, 1e-9);
    EXPECT_EQ(t.baseline_new_tokens, new_tokens);  // lossless: the same outputs
    EXPECT_GT(t.speedup(), 0.0);
}

// Hand-made totals whose figures are known: 2 prompts, 100 new tokens each way (the first of
// each prompt from the prefill), baseline 20 ms per token, speculative 5 ms per token, 24
// speculative steps of 0.4/24 s; so speed-up 4, tau (100 - 2) / 24, and a predicted speed-up of
// tau * (2 s / 98 steps) / (0.4 s / 24 steps) = 5.
TEST(Bench, FiguresFollowFromKnownTotals) {
    BenchTotals t;
    t.requests = 2;
    t.baseline_new_tokens = t.speculative_new_tokens = 100;
    t.baseline_steps = 98;
    t.speculative_steps = 24;
    t.baseline_decode_s = 2.0;
    t.speculative_decode_s = 0.5;
    t.draft_s = 0.1;
    t.verify_s = 0.3;
    EXPECT_DOUBLE_EQ(t.baseline_tpot_s(), 0.02);
    EXPECT_DOUBLE_EQ(t.speculative_tpot_s(), 0.005);
    EXPECT_DOUBLE_EQ(t.speedup(), 4.0);
    EXPECT_DOUBLE_EQ(t.tau(), 98.0 / 24.0);
    EXPECT_NEAR(t.predicted_speedup(), 5.0, 1e-12);
    // Nothing measured: every figure is 0, not NaN or infinity.
    const BenchTotals empty;
    EXPECT_EQ(empty.speedup(), 0.0);
    EXPECT_EQ(empty.tau(), 0.0);
    EXPECT_EQ(empty.predicted_speedup(), 0.0);
}

TEST(Bench, BaselineOfAnotherTargetIsCaughtAtTheFirstDifference) {
    auto be = make_cpu_backend(1);
    const Pair p = make_pair(3);
    const Pair other = make_pair(99);
    const auto prompts = make_prompts(3, p.target.config().vocab_size);
    GenerateOptions opt;
    opt.max_new_tokens = 16;
    SpeculativeEngine wrong_baseline(other.target, nullptr, *be);
    SpeculativeEngine spec(p.target, &p.drafter, *be);
    const BenchReport r = run_bench_engines(wrong_baseline, spec, prompts, opt, Logger());
    ASSERT_FALSE(r.lossless());
    ASSERT_EQ(r.mismatches.size(), 3u);  // two random targets agree on no whole output
    for (int64_t i = 0; i < 3; ++i) {
        const auto a = wrong_baseline.generate(prompts[i].tokens, opt).tokens;
        const auto b = spec.generate(prompts[i].tokens, opt).tokens;
        int64_t pos = 0;
        while (a[pos] == b[pos]) ++pos;  // both have 16 tokens and differ somewhere
        const BenchMismatch& m = r.mismatches[i];
        EXPECT_EQ(m.prompt, i);
        EXPECT_EQ(m.position, pos);
        EXPECT_EQ(m.baseline_token, a[pos]);
        EXPECT_EQ(m.speculative_token, b[pos]);
        EXPECT_FALSE(r.requests[i].outputs_match);
        EXPECT_EQ(m.to_string(),
                  fmt::format("prompt {}, position {}: baseline {} vs speculative {}", i, pos,
                              a[pos], b[pos]));
    }
    EXPECT_NE(format_bench_table(r).find("lossless: NO, 3 of 3 outputs differ; first: prompt 0"),
              std::string::npos);
    EXPECT_FALSE(bench_to_json(r)["lossless"].get<bool>());
}

TEST(Bench, FirstDifferenceHandlesPrefixes) {
    EXPECT_FALSE(first_difference(0, {1, 2, 3}, {1, 2, 3}).has_value());
    const auto m = first_difference(2, {1, 2, 3}, {1, 2});
    ASSERT_TRUE(m.has_value());
    EXPECT_EQ(m->position, 2);
    EXPECT_EQ(m->baseline_token, 3);
    EXPECT_EQ(m->speculative_token, -1);
    EXPECT_EQ(m->to_string(), "prompt 2, position 2: baseline 3 vs speculative (end)");
}

TEST(Bench, SampledRunsAreNotCheckedForLosslessness) {
    auto be = make_cpu_backend(1);
    const Pair p = make_pair(5);
    GenerateOptions opt;
    opt.max_new_tokens = 12;
    opt.sampling.temperature = 1.0f;
    const BenchReport r = run_bench(p.target, p.drafter, *be, make_prompts(2, 37), opt, Logger());
    EXPECT_FALSE(r.greedy);
    EXPECT_TRUE(r.mismatches.empty());
    EXPECT_NE(format_bench_table(r).find("lossless: not checked"), std::string::npos);
    EXPECT_FALSE(bench_to_json(r)["lossless_checked"].get<bool>());
}

// tau as the reference decoder counts it: the tokens a step commits within max_new_tokens. With
// every draft accepted (zero final norms: every logit 0, both models pick token 0), block 5 and
// a budget of 8 tokens (1 from the prefill, then 5 + 5), the second step accepts 5 tokens but
// commits 2: tau (5 + 2) / 2 = 3.5 and a histogram of one 5 and one 2. Counting what the last
// step accepted gives 5 and two 5s, which the report keeps as tau_accepted.
TEST(Bench, TauCountsOnlyTokensCommittedWithinTheBudget) {
    auto be = make_cpu_backend(1);
    Pair p = make_pair(3, 5);
    fill_f32(p.target.params().value("model.norm.weight"), 0.0f);
    fill_f32(p.drafter.params().value("norm.weight"), 0.0f);
    GenerateOptions opt;
    opt.max_new_tokens = 8;
    const BenchReport r = run_bench(p.target, p.drafter, *be, make_prompts(2, 37), opt, Logger());
    ASSERT_EQ(r.block_size, 5);
    for (const BenchRequest& q : r.requests) {
        EXPECT_EQ(q.speculative.new_tokens, 8);
        EXPECT_EQ(q.speculative.steps, 2);
        EXPECT_EQ(q.speculative.accept_hist, (std::vector<int64_t>{0, 0, 1, 0, 0, 1}));
        EXPECT_EQ(q.speculative.accepted_hist, (std::vector<int64_t>{0, 0, 0, 0, 0, 2}));
        EXPECT_DOUBLE_EQ(q.speculative.tau(), 3.5);
        EXPECT_DOUBLE_EQ(q.speculative.tau_accepted(), 5.0);
    }
    EXPECT_EQ(r.total.accept_hist, (std::vector<int64_t>{0, 0, 2, 0, 0, 2}));
    EXPECT_DOUBLE_EQ(r.total.tau(), 3.5);
    EXPECT_DOUBLE_EQ(r.mean_request_tau(), 3.5);
    EXPECT_DOUBLE_EQ(r.total.tau_accepted(), 5.0);
    const std::string table = format_bench_table(r);
    for (const char* s : {"within max_new_tokens", "3.500 mean of per-prompt tau",
                          "past the budget or a stop token: 5.000"})
        EXPECT_NE(table.find(s), std::string::npos) << s << "\n" << table;
    const nlohmann::json j = bench_to_json(r);
    EXPECT_DOUBLE_EQ(j["total"]["tau"].get<double>(), 3.5);
    EXPECT_DOUBLE_EQ(j["total"]["tau_accepted"].get<double>(), 5.0);
    EXPECT_EQ(j["total"]["accepted_hist"].get<std::vector<int64_t>>(), r.total.accepted_hist);
    EXPECT_DOUBLE_EQ(j["requests"][0]["speculative"]["tau_accepted"].get<double>(), 5.0);
}

TEST(Bench, TableAndJsonCarryEveryFigure) {
    auto be = make_cpu_backend(1);
    const Pair p = make_pair(3);
    GenerateOptions opt;
    opt.max_new_tokens = 10;
    const BenchReport r = run_bench(p.target, p.drafter, *be, make_prompts(3, 37), opt, Logger());
    const std::string table = format_bench_table(r);
    for (const char* s : {"prompt", "tau", "base tok/s", "spec tok/s", "speed-up", "ttft ms",
                          "draft ms", "verify ms", "total", "3 prompts", "predicted",
                          "lossless: yes, 3 of 3", "acceptance length"}) {
        EXPECT_NE(table.find(s), std::string::npos) << s << "\n" << table;
    }
    for (const char* s : {"\n     0  p0", "\n     1  p1", "\n     2  p2"})
        EXPECT_NE(table.find(s), std::string::npos) << s << "\n" << table;
    // One histogram row per acceptance length 1..B.
    const size_t h = table.find("acceptance length");
    EXPECT_EQ(std::count(table.begin() + h, table.end(), '\n'), 1 + 1 + 4);
    const nlohmann::json j = bench_to_json(r);
    EXPECT_EQ(j["block_size"].get<int64_t>(), 4);
    EXPECT_TRUE(j["lossless"].get<bool>());
    ASSERT_EQ(j["requests"].size(), 3u);
    EXPECT_EQ(j["requests"][1]["label"], "p1");
    EXPECT_EQ(j["requests"][1]["speculative"]["accept_hist"].size(), 5u);
    // What another engine needs to replay the run (tools/reference/drafter_roundtrip.py).
    EXPECT_EQ(j["requests"][1]["prompt_ids"].get<std::vector<int32_t>>(),
              make_prompts(3, 37)[1].tokens);
    EXPECT_EQ(j["requests"][1]["output_tokens"].size(),
              static_cast<size_t>(r.requests[1].speculative.new_tokens));
    EXPECT_TRUE(j["stop_tokens"].is_array());
    EXPECT_EQ(j["total"]["accept_hist"].get<std::vector<int64_t>>(), r.total.accept_hist);
    EXPECT_DOUBLE_EQ(j["total"]["tau"].get<double>(), r.total.tau());
    EXPECT_DOUBLE_EQ(j["total"]["speedup"].get<double>(), r.total.speedup());
    EXPECT_DOUBLE_EQ(j["total"]["predicted_speedup"].get<double>(), r.total.predicted_speedup());
    for (const char* k : {"ttft_s", "t_ar_s", "t_draft_s", "t_verify_s", "baseline_tpot_s",
                          "speculative_tpot_s", "measured_over_predicted", "tau_mean_of_requests"})
        EXPECT_TRUE(j["total"].contains(k)) << k;
}

// `dflash bench --json-steps`: each prompt's recorded steps replay its output (the first token,
// then per step the accepted drafts and the target's token), agree with the histogram, and reach
// the JSON; unrecorded runs carry none. Two pairs: a random one (every draft rejected: the
// corrections replay) and one with zero final norms (every logit 0, both models pick token 0:
// every draft accepted, the drafts replay).
TEST(Bench, RecordedStepsReplayTheOutput) {
    auto be = make_cpu_backend(1);
    for (const bool accept_all : {false, true}) {
        Pair p = make_pair(3);
        if (accept_all) {
            fill_f32(p.target.params().value("model.norm.weight"), 0.0f);
            fill_f32(p.drafter.params().value("norm.weight"), 0.0f);
        }
        GenerateOptions opt;
        opt.max_new_tokens = 20;
        opt.stop_tokens = {5};
        const auto prompts = make_prompts(3, p.target.config().vocab_size);
        const BenchReport plain = run_bench(p.target, p.drafter, *be, prompts, opt, Logger());
        EXPECT_FALSE(plain.steps_recorded);
        EXPECT_FALSE(bench_to_json(plain)["requests"][0].contains("steps"));
        const BenchReport r = run_bench(p.target, p.drafter, *be, prompts, opt, Logger(), true);
        ASSERT_TRUE(r.steps_recorded);
        const nlohmann::json j = bench_to_json(r);
        int64_t accepted = 0, drafted = 0;
        for (size_t i = 0; i < r.requests.size(); ++i) {
            const BenchRequest& q = r.requests[i];
            EXPECT_EQ(q.output_tokens, plain.requests[i].output_tokens) << i;
            ASSERT_EQ(static_cast<int64_t>(q.steps.size()), q.speculative.steps) << i;
            ASSERT_FALSE(q.output_tokens.empty());
            std::vector<int32_t> replay{q.output_tokens.front()};
            std::vector<int64_t> hist(q.speculative.accepted_hist.size(), 0);
            for (const BenchStep& st : q.steps) {
                ASSERT_EQ(st.drafted.size(), 3u);  // block 4: B - 1 drafts, all verified
                ASSERT_LE(st.accepted, 3);
                replay.insert(replay.end(), st.drafted.begin(), st.drafted.begin() + st.accepted);
                replay.push_back(st.next);
                hist[st.accepted + 1] += 1;
                accepted += st.accepted;
                drafted += 3;
            }
            EXPECT_EQ(hist, q.speculative.accepted_hist) << i;
            ASSERT_GE(replay.size(), q.output_tokens.size()) << i;
            replay.resize(q.output_tokens.size());  // a last step may pass the budget or a stop
            EXPECT_EQ(replay, q.output_tokens) << i;
            const auto& js = j["requests"][i]["steps"];
            ASSERT_EQ(js.size(), q.steps.size()) << i;
            for (size_t k = 0; k < q.steps.size(); ++k) {
                EXPECT_EQ(js[k]["drafted"].get<std::vector<int32_t>>(), q.steps[k].drafted);
                EXPECT_EQ(js[k]["accepted"].get<int64_t>(), q.steps[k].accepted);
                EXPECT_EQ(js[k]["next"].get<int32_t>(), q.steps[k].next);
            }
        }
        ASSERT_GT(drafted, 0);
        if (accept_all)
            EXPECT_EQ(accepted, drafted);
        else
            EXPECT_LT(accepted, drafted);
    }
}

TEST(Bench, OptionsFromSettings) {
    const config::Settings s =
        config::Settings(std::make_shared<const config::Registry>(config::make_registry()))
            .with_overrides({{"infer.temperature", "0.7"},
                             {"infer.top_k", "20"},
                             {"infer.top_p", "0.9"},
                             {"infer.max_new_tokens", "33"},
                             {"infer.max_context", "77"},
                             {"infer.block_size", "6"},
                             {"infer.draft_sampling", "true"},
                             {"infer.seed", "12"}});
    const GenerateOptions o = generate_options_from_settings(s);
    // Rounded to float once, here: the value the device and the host both sample with.
    EXPECT_EQ(o.sampling.temperature, 0.7f);
    EXPECT_EQ(o.sampling.top_k, 20);
    EXPECT_EQ(o.sampling.top_p, 0.9f);
    EXPECT_EQ(o.max_new_tokens, 33);
    EXPECT_EQ(o.max_context, 77);
    EXPECT_EQ(o.block_size, 6);
    EXPECT_TRUE(o.draft_sampling);
    EXPECT_EQ(o.seed, 12u);
}

}  // namespace
}  // namespace dflash

// The lossless checks of speculative decoding shared by the CPU and CUDA tests
// (support/spec_decode_checks.h).
#include "support/spec_decode_checks.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "core/rng.h"

namespace dflash::test {

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab));
    return t;
}

void expect_greedy_lossless(const TargetModel& target, const DrafterModel& drafter, Backend& be,
                            int64_t prompts, std::vector<int64_t>& hist, DraftPrecision precision) {
    SpeculativeEngine spec(target, &drafter, be);
    SpeculativeEngine plain(target, nullptr, be);
    for (int64_t i = 0; i < prompts; ++i) {
        const auto prompt = random_prompt(1 + (i * 7) % 12, target.config().vocab_size, 100 + i);
        GenerateOptions o;
        o.max_new_tokens = 5 + (i * 5) % 30;
        o.draft_precision = precision;
        const auto a = plain.generate(prompt, o);
        std::vector<int32_t> streamed;
        const auto b = spec.generate(prompt, o, [&](std::span<const int32_t> t) {
            streamed.insert(streamed.end(), t.begin(), t.end());
        });
        ASSERT_EQ(a.tokens, b.tokens) << "prompt " << i << " on " << be.name();
        EXPECT_EQ(streamed, b.tokens);
        EXPECT_EQ(static_cast<int64_t>(b.tokens.size()), o.max_new_tokens);
        // What verification accepted (a last step cut by the budget counted in full).
        ASSERT_EQ(b.stats.accepted_hist.size(), hist.size());
        for (size_t k = 0; k < b.stats.accepted_hist.size(); ++k)
            hist[k] += b.stats.accepted_hist[k];
    }
}

void expect_lossless_when_every_draft_is_accepted(TargetModel& target, const DrafterModel& drafter,
                                                  Backend& be, const std::string& label) {
    ASSERT_FALSE(target.config().tie_word_embeddings) << label;
    be.fill(target.lm_head(), 0.0f);
    const int64_t block = drafter.block_size();
    std::vector<int64_t> hist(block + 1, 0);
    expect_greedy_lossless(target, drafter, be, 6, hist);
    for (int64_t k = 1; k < block; ++k)
        EXPECT_EQ(hist[k], 0) << label << ": a step accepted " << k - 1 << " drafts";
    EXPECT_GT(hist[block], 0) << label << ": no step accepted every draft";
}

void expect_every_accepted_length(const std::vector<int64_t>& hist, const std::string& label) {
    const auto block = static_cast<int64_t>(hist.size()) - 1;
    std::printf("%s, block %lld: steps that accepted 0..%lld drafts:", label.c_str(),
                static_cast<long long>(block), static_cast<long long>(block - 1));
    for (int64_t a = 0; a < block; ++a) std::printf(" %lld", static_cast<long long>(hist[a + 1]));
    std::printf("\n");
    // hist[a + 1]: steps with a drafts accepted.
    for (int64_t a = 0; a < block; ++a)
        EXPECT_GT(hist[a + 1], 0) << label << ": no step accepted " << a << " drafts";
}

std::vector<double> exact_first_three(const TargetModel& target, Backend& be,
                                      const std::vector<int32_t>& prompt, const SampleParams& sp) {
    const int64_t V = target.config().vocab_size;
    std::vector<double> out(V * V * V, 0.0);
    auto probs_after = [&](const std::vector<int32_t>& seq) {
        TargetSession s(target, be, 32, {}, 8);
        const DeviceTensor l(be, {1, V}, DType::f32);
        s.forward(seq, l, Tensor());
        const HostTensor h = to_host_f32(be, l);
        return sampling_probs(std::span(h.f32(), static_cast<size_t>(V)), sp);
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

ChiSquare chi_square(std::span<const double> probs, std::span<const int64_t> counts, int64_t n) {
    ChiSquare r;
    double pooled_e = 0, pooled_o = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
        const double e = probs[i] * static_cast<double>(n);
        const auto o = static_cast<double>(counts[i]);
        if (e < 5) {
            pooled_e += e;
            pooled_o += o;
            continue;
        }
        r.statistic += (o - e) * (o - e) / e;
        ++r.cells;
    }
    if (pooled_e > 0) {
        r.statistic += (pooled_o - pooled_e) * (pooled_o - pooled_e) / pooled_e;
        ++r.cells;
    }
    const double k = r.cells - 1, z = 3.09;  // z: the normal's upper 0.1% point
    r.critical = k * std::pow(1 - 2 / (9 * k) + z * std::sqrt(2 / (9 * k)), 3);
    return r;
}

ChiSquare expect_first_tokens_follow_target(const TargetModel& target, const DrafterModel& drafter,
                                            Backend& be, bool draft_sampling, int64_t samples) {
    const int64_t V = target.config().vocab_size;
    SpeculativeEngine spec(target, &drafter, be);
    const std::vector<int32_t> prompt = {1, 3, 2};
    GenerateOptions o;
    o.max_new_tokens = 3;
    o.sampling.temperature = 1.3f;
    o.draft_sampling = draft_sampling;
    const auto t0 = std::chrono::steady_clock::now();
    const auto exact = exact_first_three(target, be, prompt, o.sampling);
    std::vector<int64_t> counts(exact.size(), 0);
    for (int64_t i = 0; i < samples; ++i) {
        o.seed = 1000 + static_cast<uint64_t>(i);
        const auto r = spec.generate(prompt, o);
        EXPECT_EQ(r.tokens.size(), 3u);
        if (r.tokens.size() != 3u) return {};
        counts[(r.tokens[0] * V + r.tokens[1]) * V + r.tokens[2]] += 1;
    }
    const ChiSquare c = chi_square(exact, counts, samples);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf(
        "%s, %s drafts: chi-square %.1f over %d cells (0.1%% critical value %.1f), %lld "
        "sampled runs in %.1f s\n",
        be.name().c_str(), draft_sampling ? "sampled" : "greedy", c.statistic, c.cells, c.critical,
        static_cast<long long>(samples), secs);
    ::testing::Test::RecordProperty("chi_square", std::to_string(c.statistic));
    EXPECT_LT(c.statistic, c.critical)
        << c.cells << " cells on " << be.name() << ": the first 3 sampled tokens do not follow "
        << "the target's distribution";
    return c;
}

}  // namespace dflash::test

// The two checks that speculative decoding is lossless, written once for every backend and family
// (docs/speculative-sampling.md): greedy speculative output equals plain greedy output token for
// token, and under sampling the first tokens follow the target's exact distribution (chi-square).
// Used on the CPU by tests/infer/spec_decode_test.cpp and dspark_decode_test.cpp, and on CUDA by
// tests/cuda/moe_target_cuda_test.cpp and hybrid_target_cuda_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "infer/sampler.h"
#include "infer/spec_decode.h"
#include "model/drafter.h"
#include "model/target.h"

namespace dflash::test {

// n token ids below vocab (the tiny drafters' MASK id, vocab - 1, included).
std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint64_t seed);

// Greedy decoding of `prompts` prompts (prompt i: 1 + 7i mod 12 tokens of seed 100 + i, a budget
// of 5 + 5i mod 30 tokens) with and without the drafter on `be`: the same tokens, the budget
// filled, and what was streamed is what was returned. Adds the speculative runs' accepted_hist
// into hist (hist[a + 1]: steps whose verification accepted a drafts).
void expect_greedy_lossless(const TargetModel& target, const DrafterModel& drafter, Backend& be,
                            int64_t prompts, std::vector<int64_t>& hist,
                            DraftPrecision precision = DraftPrecision::f32);

// Zeroes the target's lm_head (untied): every logit is 0, so the target and the drafter both pick
// token 0 and every step accepts every draft; greedy decoding stays lossless over 6 prompts.
void expect_lossless_when_every_draft_is_accepted(TargetModel& target, const DrafterModel& drafter,
                                                  Backend& be, const std::string& label);

// Every accepted length 0 .. block-1 occurred (hist as expect_greedy_lossless fills it, block + 1
// entries); prints the counts after `label`.
void expect_every_accepted_length(const std::vector<int64_t>& hist, const std::string& label);

// The exact probability of every 3 first generated tokens (index (a * V + b) * V + c) under the
// target's sampling distribution `sp` after `prompt`, from the target's logits on `be` (full
// forwards of prompt, prompt + a, prompt + a + b).
std::vector<double> exact_first_three(const TargetModel& target, Backend& be,
                                      const std::vector<int32_t>& prompt, const SampleParams& sp);

// Pearson's chi-square of `counts` (n draws) against the probabilities `probs`, cells expected
// fewer than 5 times pooled into one, with the 0.1% critical value for (cells - 1) degrees of
// freedom (Wilson-Hilferty).
struct ChiSquare {
    double statistic = 0, critical = 0;
    int cells = 0;
};
ChiSquare chi_square(std::span<const double> probs, std::span<const int64_t> counts, int64_t n);

// Speculative sampling at temperature 1.3 after the prompt {1, 3, 2} (a vocabulary of 4: 64
// outcomes for 3 tokens), `samples` runs of seeds 1000.. on `be`, greedy or sampled drafts: the
// first 3 generated tokens follow exact_first_three (chi-square at 0.1%). Prints the statistic
// and the time taken, and records the statistic as a test property.
ChiSquare expect_first_tokens_follow_target(const TargetModel& target, const DrafterModel& drafter,
                                            Backend& be, bool draft_sampling,
                                            int64_t samples = 12000);

}  // namespace dflash::test

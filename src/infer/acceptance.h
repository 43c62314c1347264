// The verification rule of speculative decoding: how many drafted tokens to keep and which token
// comes next, such that the emitted tokens are distributed exactly as the target's own samples.
// Derivation: docs/speculative-sampling.md. Tested by tests/infer/acceptance_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"

namespace dflash {

struct VerifyOutcome {
    int64_t accepted = 0;  // a: drafts d_1..d_a are kept
    int32_t next = 0;      // the token after them: the bonus (a = n) or the correction (a < n)
};

// Greedy (temperature 0): accept while d_{i+1} == argmax(target row i); next = argmax(row a).
// target_argmax has n+1 entries for n drafts.
VerifyOutcome verify_greedy(std::span<const int32_t> drafts,
                            std::span<const int32_t> target_argmax);

// Sampling: target_probs has n+1 rows (row i is the target's sampling distribution for the token
// after draft i, given the drafts before it). draft_probs has n rows, or is empty when the drafts
// were chosen deterministically (greedy draft: a one-hot proposal). Draft d_{i+1} is accepted with
// probability min(1, p_i(d)/q_i(d)); the first rejection draws the next token from
// normalise(max(0, p_i - q_i)); if all are accepted, the bonus is drawn from row n.
VerifyOutcome verify_sampled(std::span<const int32_t> drafts,
                             const std::vector<std::vector<double>>& target_probs,
                             const std::vector<std::vector<double>>& draft_probs, Rng& rng);

}  // namespace dflash

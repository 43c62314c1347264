// The DFlash2 selector's walk over a block's candidate lattice (docs/formats.md "DFlash2 drafter
// directory"), on the host: greedy (T = 0: at each slot the best-scoring candidate given the token
// chosen before it, ties to the lowest candidate index) or sampled (q_p = softmax(S_p / T) over the
// K candidates, one draw per slot). The walk starts at the verified anchor. Tested by
// tests/infer/selector_walk_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "model/candidate_selector.h"

namespace dflash {

struct SelectorPath {
    std::vector<int32_t> tokens;         // [P] drafted tokens
    std::vector<int64_t> choice;         // [P] index of each token among its slot's candidates
    std::vector<std::vector<double>> q;  // sampled walks: [P][K] the distribution each draw used
};

SelectorPath greedy_walk(const CandidateLattice& lat);
SelectorPath sampled_walk(const CandidateLattice& lat, double temperature, Rng& rng);

// q over the whole vocabulary (zero off the candidates) for the acceptance rule: the sampled
// walk's distribution of slot p scattered onto its candidate ids.
std::vector<double> scatter_q(const CandidateLattice& lat, const SelectorPath& path, int64_t p,
                              int64_t vocab);

}  // namespace dflash

// Anchor sampling for DFlash training (dflash-spec.md §3.3, SpecForge HEAD rule): the positions
// whose token starts a draft block. Tested by tests/data/anchors_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"

namespace dflash {

// Candidates are positions p <= S-2 with loss_mask[p] and loss_mask[p+1] both 1: the anchor is
// response text and so is at least the first token the block predicts. Draws
// min(num_anchors, #candidates) distinct candidates uniformly without replacement and returns them
// sorted ascending. Deterministic given the Rng's state; advances it.
std::vector<int32_t> sample_anchors(std::span<const uint8_t> loss_mask, int64_t num_anchors,
                                    Rng& rng);

// The candidate positions themselves, ascending.
std::vector<int32_t> anchor_candidates(std::span<const uint8_t> loss_mask);

}  // namespace dflash

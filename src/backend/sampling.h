// The sampling distribution every backend's sample_rows draws from, and the draw itself: softmax of
// logits / temperature, restricted to the top_k most likely tokens (0: all), then to the smallest
// prefix of them (by decreasing probability, index order on ties) whose mass reaches top_p (1:
// off), renormalised; a uniform u in [0, 1) picks the first token, in index order, whose cumulative
// probability exceeds u. Shared by the CPU op and the decoding engine's host-side sampler
// (infer/sampler.h). Tested by tests/ops/sampling_test.cpp and tests/infer/sampler_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dflash {

std::vector<double> sampling_distribution(std::span<const float> logits, double temperature,
                                          int64_t top_k, double top_p);
// The token u picks from probs (probabilities summing to 1 up to rounding).
int32_t pick_from(std::span<const double> probs, double u);

}  // namespace dflash

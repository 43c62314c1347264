// Token sampling from logits: greedy, temperature, top-k, top-p, and the probability vectors the
// speculative acceptance rule needs. Tested by tests/infer/sampler_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/ops.h"
#include "core/rng.h"

namespace dflash {

// The parameters are backend/ops.h's SampleParams, the ones the device draws with.

// Index of the largest logit (lowest index on ties).
int32_t argmax(std::span<const float> logits);

// The distribution sampling draws from: softmax(logits / T) restricted to the top-k and then to the
// smallest top-p nucleus, renormalised. Greedy params give the one-hot of argmax.
std::vector<double> sampling_probs(std::span<const float> logits, const SampleParams& p);

// One draw from a probability vector (sums to 1 up to rounding).
int32_t sample_from(std::span<const double> probs, Rng& rng);

// sample_from(sampling_probs(logits, p)) (argmax when greedy).
int32_t sample_token(std::span<const float> logits, const SampleParams& p, Rng& rng);

}  // namespace dflash

// Sampling. Tested by tests/infer/sampler_test.cpp.
#include "infer/sampler.h"

#include <algorithm>

#include "backend/sampling.h"
#include "core/error.h"

namespace dflash {

int32_t argmax(std::span<const float> logits) {
    DF_ASSERT(!logits.empty());
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
    return best;
}

std::vector<double> sampling_probs(std::span<const float> logits, const SampleParams& p) {
    if (p.greedy()) {
        std::vector<double> probs(logits.size(), 0.0);
        probs[argmax(logits)] = 1.0;
        return probs;
    }
    return sampling_distribution(logits, p.temperature, p.top_k, p.top_p);
}

int32_t sample_from(std::span<const double> probs, Rng& rng) {
    return pick_from(probs, rng.uniform_f64());
}

int32_t sample_token(std::span<const float> logits, const SampleParams& p, Rng& rng) {
    if (p.greedy()) return argmax(logits);
    const auto probs = sampling_probs(logits, p);
    return sample_from(probs, rng);
}

}  // namespace dflash

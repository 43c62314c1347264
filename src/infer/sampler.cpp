// Sampling. Tested by tests/infer/sampler_test.cpp.
#include "infer/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace dflash {

int32_t argmax(std::span<const float> logits) {
    DF_ASSERT(!logits.empty());
    int32_t best = 0;
    for (size_t i = 1; i < logits.size(); ++i)
        if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
    return best;
}

std::vector<double> sampling_probs(std::span<const float> logits, const SamplingParams& p) {
    const size_t V = logits.size();
    std::vector<double> probs(V, 0.0);
    if (p.greedy()) {
        probs[argmax(logits)] = 1.0;
        return probs;
    }
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (size_t i = 0; i < V; ++i) {
        probs[i] = std::exp((logits[i] - mx) / p.temperature);
        sum += probs[i];
    }
    for (auto& x : probs) x /= sum;
    const bool top_k = p.top_k > 0 && static_cast<size_t>(p.top_k) < V;
    if (!top_k && p.top_p >= 1.0) return probs;
    // Candidates by decreasing probability (index order on ties, so the result is deterministic).
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
    size_t keep = top_k ? static_cast<size_t>(p.top_k) : V;
    if (p.top_p < 1.0) {
        double kept_mass = 0;
        for (size_t i = 0; i < keep; ++i) kept_mass += probs[order[i]];
        double cum = 0;
        for (size_t i = 0; i < keep; ++i) {
            cum += probs[order[i]] / kept_mass;
            if (cum >= p.top_p) {
                keep = i + 1;
                break;
            }
        }
    }
    std::vector<double> out(V, 0.0);
    double kept = 0;
    for (size_t i = 0; i < keep; ++i) kept += probs[order[i]];
    for (size_t i = 0; i < keep; ++i) out[order[i]] = probs[order[i]] / kept;
    return out;
}

int32_t sample_from(std::span<const double> probs, Rng& rng) {
    const double u = rng.uniform_f64();
    double cum = 0;
    int32_t last_nonzero = 0;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (probs[i] <= 0) continue;
        cum += probs[i];
        last_nonzero = static_cast<int32_t>(i);
        if (u < cum) return last_nonzero;
    }
    return last_nonzero;  // rounding left u just above the total
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& p, Rng& rng) {
    if (p.greedy()) return argmax(logits);
    const auto probs = sampling_probs(logits, p);
    return sample_from(probs, rng);
}

}  // namespace dflash

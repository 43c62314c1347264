// Sampling distribution and draw. Tested by tests/ops/sampling_test.cpp and
// tests/infer/sampler_test.cpp.
#include "backend/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"

namespace dflash {

std::vector<double> sampling_distribution(std::span<const float> logits, double temperature,
                                          int64_t top_k, double top_p) {
    const size_t V = logits.size();
    DF_ASSERT(V > 0 && temperature > 0, "sampling over {} logits at temperature {}", V,
              temperature);
    std::vector<double> probs(V, 0.0);
    const double mx = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (size_t i = 0; i < V; ++i) {
        probs[i] = std::exp((logits[i] - mx) / temperature);
        sum += probs[i];
    }
    for (auto& x : probs) x /= sum;
    const bool limit_k = top_k > 0 && static_cast<size_t>(top_k) < V;
    if (!limit_k && top_p >= 1.0) return probs;
    // Candidates by decreasing probability (index order on ties, so the result is deterministic).
    std::vector<int32_t> order(V);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
    size_t keep = limit_k ? static_cast<size_t>(top_k) : V;
    if (top_p < 1.0) {
        double kept_mass = 0;
        for (size_t i = 0; i < keep; ++i) kept_mass += probs[order[i]];
        double cum = 0;
        for (size_t i = 0; i < keep; ++i) {
            cum += probs[order[i]] / kept_mass;
            if (cum >= top_p) {
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

int32_t pick_from(std::span<const double> probs, double u) {
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

}  // namespace dflash

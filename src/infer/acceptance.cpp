// Speculative acceptance. Tested by tests/infer/acceptance_test.cpp.
#include "infer/acceptance.h"

#include <algorithm>

#include "core/error.h"
#include "infer/sampler.h"

namespace dflash {

VerifyOutcome verify_greedy(std::span<const int32_t> drafts,
                            std::span<const int32_t> target_argmax) {
    DF_ASSERT(target_argmax.size() == drafts.size() + 1);
    int64_t a = 0;
    while (a < static_cast<int64_t>(drafts.size()) && drafts[a] == target_argmax[a]) ++a;
    return {a, target_argmax[a]};
}

VerifyOutcome verify_sampled(std::span<const int32_t> drafts,
                             const std::vector<std::vector<double>>& target_probs,
                             const std::vector<std::vector<double>>& draft_probs, Rng& rng) {
    const size_t n = drafts.size();
    DF_ASSERT(target_probs.size() == n + 1);
    DF_ASSERT(draft_probs.empty() || draft_probs.size() == n);
    for (size_t i = 0; i < n; ++i) {
        const auto& p = target_probs[i];
        const int32_t d = drafts[i];
        const double q_d = draft_probs.empty() ? 1.0 : draft_probs[i][d];
        DF_ASSERT(q_d > 0, "draft token {} has proposal probability 0", d);
        const double accept = std::min(1.0, p[d] / q_d);
        if (rng.uniform_f64() < accept) continue;
        // Rejected: the residual max(0, p - q). With a one-hot proposal it is p without d.
        std::vector<double> residual(p.size());
        double total = 0;
        for (size_t v = 0; v < p.size(); ++v) {
            const double q = draft_probs.empty() ? (static_cast<int32_t>(v) == d ? 1.0 : 0.0)
                                                 : draft_probs[i][v];
            residual[v] = std::max(0.0, p[v] - q);
            total += residual[v];
        }
        // total == 0 only when p == q, where rejection has probability 0; guard rounding anyway.
        if (total <= 0) return {static_cast<int64_t>(i), sample_from(p, rng)};
        for (auto& r : residual) r /= total;
        return {static_cast<int64_t>(i), sample_from(residual, rng)};
    }
    return {static_cast<int64_t>(n), sample_from(target_probs[n], rng)};
}

}  // namespace dflash

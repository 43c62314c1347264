// Anchor sampling (see anchors.h). Tested by tests/data/anchors_test.cpp.
#include "data/anchors.h"

#include <algorithm>

#include "core/error.h"

namespace dflash {

std::vector<int32_t> anchor_candidates(std::span<const uint8_t> loss_mask) {
    DF_CHECK(loss_mask.size() <= static_cast<size_t>(INT32_MAX),
             "sequence of {} tokens is too long for int32 anchor positions", loss_mask.size());
    std::vector<int32_t> out;
    for (size_t p = 0; p + 1 < loss_mask.size(); ++p) {
        if (loss_mask[p] && loss_mask[p + 1]) out.push_back(static_cast<int32_t>(p));
    }
    return out;
}

std::vector<int32_t> sample_anchors(std::span<const uint8_t> loss_mask, int64_t num_anchors,
                                    Rng& rng) {
    DF_CHECK(num_anchors >= 0, "num_anchors={} must be >= 0", num_anchors);
    std::vector<int32_t> cand = anchor_candidates(loss_mask);
    const size_t k = std::min(static_cast<size_t>(num_anchors), cand.size());
    // Partial Fisher-Yates: the first k slots become a uniform k-subset in k draws.
    for (size_t i = 0; i < k; ++i) {
        const size_t j = i + static_cast<size_t>(rng.below(cand.size() - i));
        std::swap(cand[i], cand[j]);
    }
    cand.resize(k);
    std::sort(cand.begin(), cand.end());
    return cand;
}

}  // namespace dflash

// Anchor sampling (see anchors.h). Tested by tests/data/anchors_test.cpp.
#include "data/anchors.h"

#include <algorithm>

#include "core/error.h"

namespace dflash {
namespace {

// min(num_anchors, #cand) distinct candidates, uniformly, sorted ascending.
std::vector<int32_t> draw(std::vector<int32_t> cand, int64_t num_anchors, Rng& rng) {
    DF_CHECK(num_anchors >= 0, "num_anchors={} must be >= 0", num_anchors);
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

}  // namespace

Rng sequence_anchor_rng(uint64_t anchor_seed, int64_t epoch, uint64_t sequence_index) {
    return Rng(anchor_seed).fork(static_cast<uint64_t>(epoch)).fork(sequence_index);
}

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
    return draw(anchor_candidates(loss_mask), num_anchors, rng);
}

std::vector<int32_t> document_anchor_candidates(std::span<const uint8_t> loss_mask,
                                                std::span<const int32_t> doc_starts,
                                                int64_t block_size) {
    DF_CHECK(block_size >= 2, "block_size={} must be >= 2", block_size);
    const auto S = static_cast<int64_t>(loss_mask.size());
    DF_CHECK(doc_starts.empty() ||
                 (doc_starts[0] == 0 && std::is_sorted(doc_starts.begin(), doc_starts.end()) &&
                  doc_starts.back() <= S),
             "document starts must ascend from 0 within the {} tokens of the sequence", S);
    std::vector<int32_t> out;
    size_t doc = 0;
    for (int32_t p : anchor_candidates(loss_mask)) {
        while (doc + 1 < doc_starts.size() && doc_starts[doc + 1] <= p) ++doc;
        const int64_t end = doc + 1 < doc_starts.size() ? doc_starts[doc + 1] : S;
        if (p + block_size <= end) out.push_back(p);
    }
    return out;
}

std::vector<int32_t> sample_document_anchors(std::span<const uint8_t> loss_mask,
                                             std::span<const int32_t> doc_starts,
                                             int64_t block_size, int64_t num_anchors, Rng& rng) {
    return draw(document_anchor_candidates(loss_mask, doc_starts, block_size), num_anchors, rng);
}

std::vector<int32_t> anchor_document_starts(std::span<const int32_t> anchors,
                                            std::span<const int32_t> doc_starts) {
    std::vector<int32_t> out;
    out.reserve(anchors.size());
    for (int32_t a : anchors) {
        const auto it = std::upper_bound(doc_starts.begin(), doc_starts.end(), a);
        out.push_back(it == doc_starts.begin() ? 0 : *(it - 1));
    }
    return out;
}

}  // namespace dflash

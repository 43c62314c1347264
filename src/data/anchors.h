// Anchor sampling for DFlash training (docs/data.md "Anchors"): the positions whose token starts a
// draft block, over the whole packed sequence or document by document (train.documents), each
// sequence from its own random stream. Tested by tests/data/anchors_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/rng.h"

namespace dflash {

// The random stream a training sequence's anchors are drawn from: keyed by the run's anchor seed,
// the epoch and the sequence's index in the epoch's global order, and by nothing else: not by the
// worker, the micro-batch, the sequences drawn before it, or the lengths of the others. A
// sequence's anchors are therefore the same for any worker count, batch size or accumulation
// (docs/training.md "Anchors and batch invariance").
Rng sequence_anchor_rng(uint64_t anchor_seed, int64_t epoch, uint64_t sequence_index);

// Candidates are positions p <= S-2 with loss_mask[p] and loss_mask[p+1] both 1: the anchor is
// response text and so is at least the first token the block predicts. Draws
// min(num_anchors, #candidates) distinct candidates uniformly without replacement and returns them
// sorted ascending. Deterministic given the Rng's state; advances it.
std::vector<int32_t> sample_anchors(std::span<const uint8_t> loss_mask, int64_t num_anchors,
                                    Rng& rng);

// The candidate positions themselves, ascending.
std::vector<int32_t> anchor_candidates(std::span<const uint8_t> loss_mask);

// Document-aware candidates of a packed sequence: those of anchor_candidates whose whole block
// [p, p + block_size) lies inside p's document, so no block row sits in (or predicts a token of)
// another document. doc_starts: the documents' offsets, ascending, the first 0; empty means one
// document.
std::vector<int32_t> document_anchor_candidates(std::span<const uint8_t> loss_mask,
                                                std::span<const int32_t> doc_starts,
                                                int64_t block_size);

// sample_anchors over document_anchor_candidates (the same draw, so with one document whose
// every block fits it picks what sample_anchors would).
std::vector<int32_t> sample_document_anchors(std::span<const uint8_t> loss_mask,
                                             std::span<const int32_t> doc_starts,
                                             int64_t block_size, int64_t num_anchors, Rng& rng);

// For each anchor, the offset of the document holding it (0 when doc_starts is empty): the first
// context row its block may see.
std::vector<int32_t> anchor_document_starts(std::span<const int32_t> anchors,
                                            std::span<const int32_t> doc_starts);

}  // namespace dflash

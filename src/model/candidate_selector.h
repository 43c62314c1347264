// The DFlash2 candidate selector at inference (docs/formats.md "DFlash2 drafter directory"): per
// drafted slot p, the unary top-K of the drafter's logits (after output_multiplier and the soft
// cap) and the pair scores of every (candidate of slot p-1, candidate of slot p) edge, on the
// device in three ops (topk_rows, one copy, selector_scores_fwd), downloaded once as a small K x K
// lattice per slot. The walk over it (greedy or sampled) runs on the host: infer/selector_walk.h.
// Tested by tests/model/dflash2_drafter_test.cpp and tests/infer/selector_walk_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/drafter.h"

namespace dflash {

// Host copy of one block's candidates. Slot p (0-based: the block's row p+1) has K candidates by
// unary rank; its predecessors are the candidates of slot p-1, and slot 0's only predecessor is
// the anchor (every i gives the same scores there).
struct CandidateLattice {
    int64_t P = 0, K = 0;
    std::vector<int32_t> ids;  // [P, K] candidate token ids, unary order (largest first)
    std::vector<float> unary;  // [P, K] U: logits * output_multiplier, soft-capped (f32)
    std::vector<float> pair;   // [P, K, K] pair[p, i, j]: edge from predecessor i to candidate j
    // S_p(i -> j) = U_p(j) + pair_p(i, j), in f32 as the reference scores.
    float score(int64_t p, int64_t i, int64_t j) const {
        return unary[p * K + j] + pair[(p * K + i) * K + j];
    }
};

// The unary post-processing of docs/formats.md "DFlash2 drafter directory" on one logit: l * m,
// then s * tanh(l / s) when the cap s > 0. Increasing in l (m > 0), so top-K may be taken on the
// raw logits.
float dflash2_unary(float logit, const Dflash2Config& c);

class CandidateSelector {
  public:
    // max_slots: the most drafted slots per block (block size - 1).
    CandidateSelector(const DrafterModel& model, Backend& be, int64_t max_slots);
    // logits f32 [P, V] (raw drafter logits of slots 0..P-1), z [P, r] (hidden_projection of the
    // slots' normed hidden states, DrafterSession::selector_z), anchor: the block's token 0.
    void select(const Tensor& logits, const Tensor& z, int32_t anchor, CandidateLattice& out);

  private:
    const DrafterModel& model_;
    Backend& be_;
    int64_t K_;
    DeviceTensor values_, ids_, pred_, pair_;  // f32 [P,K], i32 [P,K], i32 [P,K], f32 [P,K,K]
    HostTensor values_h_, ids_h_, pair_h_;
};

}  // namespace dflash

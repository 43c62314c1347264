// The loss on a drafter's block rows (train.loss): cross-entropy against the data's tokens, a
// distance from the target's own next-token distribution (forward or reverse KL, JSD, TV, L1), or
// a weighted sum of these (docs/training.md "Distribution losses"). Shared by every drafter kind:
// it sees only the final-normed block-row hidden states and the (frozen, shared) LM head, so a
// drafter of another architecture (DFlash2) calls it the same way. Tested by
// tests/model/block_loss_test.cpp and, through the drafter, tests/model/drafter_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace.h"

namespace dflash {

// ce: cross-entropy on the data's tokens; the others compare the draft's q with the target's p
// (kl = KL(p || q), rkl = KL(q || p), jsd, tv = |p - q|_1 / 2, l1 = |p - q|_1).
enum class LossKind { ce, kl, rkl, jsd, tv, l1 };

// How block rows are weighed (train.loss_weighting, docs/training.md "D-PACE"): decay = the loss
// mask x exp(-(k-1)/gamma), known before the forward; dpace = D-PACE, the expected accepted length
// a slot's success makes reachable, computed from the rows' own cross-entropies in the step.
enum class LossWeighting { decay, dpace };

const char* loss_kind_name(LossKind kind);
LossWeighting parse_loss_weighting(const std::string& name);
const char* loss_weighting_name(LossWeighting weighting);

struct LossTerm {
    LossKind kind = LossKind::ce;
    double weight = 1.0;  // > 0
};

// train.loss: one loss or a weighted sum of distinct ones. The terms share one row weighting and
// one normaliser: a row's loss is sum_k weight_k * loss_k, weighed and normalised like one loss.
struct LossMix {
    std::vector<LossTerm> terms{{LossKind::ce, 1.0}};
    LossMix() = default;
    LossMix(LossKind kind) : terms{{kind, 1.0}} {}  // NOLINT: a single loss reads as its kind
    double weight(LossKind kind) const;             // 0 when not a term
    // Whether the mix is exactly `kind` alone at weight 1 (what D-PACE requires of ce).
    bool is_only(LossKind kind) const {
        return terms.size() == 1 && terms[0].kind == kind && terms[0].weight == 1.0;
    }
    // Whether a term needs the target's distribution (every kind but ce).
    bool needs_teacher() const;
    // The teacher terms as lm_head_kl's mix (l1 is tv with twice the weight).
    LmHeadDivergences divergences() const;
    // The train.loss text that parses back to this mix: "kl", "0.1*ce+0.9*l1".
    std::string name() const;
};

// A train.loss value: terms joined by '+', each "kind" or "weight*kind" (spaces allowed), every
// kind at most once, weights finite and > 0. Anything else is an error naming train.loss and the
// kinds.
LossMix parse_loss_mix(const std::string& text);

// The target row whose next-token distribution teaches block row k of the block anchored at a:
// block row k predicts token a + k, which the target predicts from position a + k - 1. Rows that
// are not trained (k = 0, past the sequence) get a valid position in [0, S) all the same.
int32_t teacher_position(int64_t anchor, int64_t k, int64_t seq_len);

struct BlockLossArgs {
    LossMix loss;
    Tensor hf;       // [R, D] final-normed block rows (the drafter's)
    Tensor lm_head;  // [V, D] the target's, frozen
    Tensor labels;   // i32 [R] (device): the data's tokens, -1 where weight is 0
    Tensor weights;  // f32 [R] (device): the decay weights
    // Losses that need a teacher only: the target's final-normed hidden states [S, D] (device) and,
    // per block row, the row of it that teaches the row (i32 [R], device; teacher_position).
    Tensor teacher_hidden;
    Tensor teacher_rows;
    float grad_scale = 1.0f;
    // Optional f32 [R] (device): the weights times the gradient scale, used for the gradient
    // instead of weights and grad_scale (so a recorded step, Backend::run_step, reads the scale
    // from device memory).
    Tensor grad_weights;
    int64_t chunk = 8192;
    int64_t period = 1;  // accuracy positions: the block size
    // > 0: D-PACE weighting with this alpha (ce only). weights (and grad_weights) are then the
    // 0/1 slot mask (times the scale), blocks are `period` rows, and the weights applied to the
    // loss and its gradient are Backend::dpace_weights of the rows' cross-entropies (detached).
    float dpace_alpha = 0.0f;
    // Evaluation outputs (optional, device): argmax_out i32 [R] receives each row's argmax (the
    // greedy draft); tv_out f32 [R] each weighted row's total variation distance between the
    // draft's and the teacher's distributions, |q - p|_1 / 2 (needs teacher_hidden and
    // teacher_rows whatever the loss), one more pass of the LM head (docs/training.md "Metrics").
    Tensor argmax_out;
    Tensor tv_out;
};

// Adds weight * loss of every row and the per-position accuracy of the draft's argmax against
// labels into stats (LossStatsLayout{period}); writes dh [R, D] (when non-empty) with
// grad_scale * d(sum_r w_r loss_r)/dhf. Memory from ws. With D-PACE, w_r are the D-PACE weights
// (held constant in the gradient), and the stats' weight sum is theirs too.
void block_loss(Backend& be, Workspace& ws, const BlockLossArgs& a, const Tensor& dh,
                const Tensor& stats);

}  // namespace dflash

// The loss on a drafter's block rows (train.loss): cross-entropy against the data's tokens, or KL
// distillation from the target's own next-token distribution. Shared by every drafter kind: it
// sees only the final-normed block-row hidden states and the (frozen, shared) LM head, so a
// drafter of another architecture (DFlash2) calls it the same way. Tested by
// tests/model/block_loss_test.cpp and, through the drafter, tests/model/drafter_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "backend/backend.h"
#include "backend/workspace.h"

namespace dflash {

enum class LossKind { ce, kl };

// How block rows are weighed (train.loss_weighting, docs/training.md "D-PACE"): decay = the loss
// mask x exp(-(k-1)/gamma), known before the forward; dpace = D-PACE, the expected accepted length
// a slot's success makes reachable, computed from the rows' own cross-entropies in the step.
enum class LossWeighting { decay, dpace };

// "ce" / "kl" (the train.loss values); anything else is an error naming the choices.
LossKind parse_loss_kind(const std::string& name);
const char* loss_kind_name(LossKind kind);
LossWeighting parse_loss_weighting(const std::string& name);
const char* loss_weighting_name(LossWeighting weighting);

// The target row whose next-token distribution teaches block row k of the block anchored at a:
// block row k predicts token a + k, which the target predicts from position a + k - 1. Rows that
// are not trained (k = 0, past the sequence) get a valid position in [0, S) all the same.
int32_t teacher_position(int64_t anchor, int64_t k, int64_t seq_len);

struct BlockLossArgs {
    LossKind kind = LossKind::ce;
    Tensor hf;       // [R, D] final-normed block rows (the drafter's)
    Tensor lm_head;  // [V, D] the target's, frozen
    Tensor labels;   // i32 [R] (device): the data's tokens, -1 where weight is 0
    Tensor weights;  // f32 [R] (device): the decay weights
    // kl only: the target's final-normed hidden states [S, D] (device) and, per block row, the
    // row of it that teaches the row (i32 [R], device; teacher_position).
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
};

// Adds weight * loss of every row and the per-position accuracy of the draft's argmax against
// labels into stats (LossStatsLayout{period}); writes dh [R, D] (when non-empty) with
// grad_scale * d(sum_r w_r loss_r)/dhf. Memory from ws. With D-PACE, w_r are the D-PACE weights
// (held constant in the gradient), and the stats' weight sum is theirs too.
void block_loss(Backend& be, Workspace& ws, const BlockLossArgs& a, const Tensor& dh,
                const Tensor& stats);

}  // namespace dflash

// The DFlash2 candidate selector's training loss (train.selector_loss_alpha; docs/training.md "The
// selector's loss") on a drafter's block rows, entirely in backend ops (a recorded step replays
// it): per trained slot, the strict unary top-K of the slot's logits (chunks of rows through the
// frozen LM head, then topk_rows), the target injected over the weakest candidate when it is
// missing (hard target injection, with its own unary value), the edge scores U(c) + pair(pred, c)
// with the data token before the slot as the teacher-forced predecessor, and the K-way
// cross-entropy, weighted like the unary loss. Gradients flow into the unary logits (hence the
// block rows), the hidden projection and both codebooks: nothing is detached. docs/training.md says
// why. Tested by tests/model/dflash2_selector_loss_test.cpp.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "model/hf_config.h"
#include "model/params.h"

namespace dflash {

struct SelectorLossArgs {
    Tensor hf;       // [R, D] final-normed block rows (the drafter's)
    Tensor lm_head;  // [V, D] the target's, frozen
    Tensor labels;   // i32 [R] (device): the unary loss's targets, -1 where weight is 0
    Tensor weights;  // f32 [R] (device): the unary loss's weights
    // f32 [R] (device): alpha x the gradient scale x weights; empty: no gradient.
    Tensor grad_weights;
    Tensor pred;  // i32 [R] (device): each row's teacher-forced predecessor (ids in [0, V))
    int64_t block = 1;
    // Vocabulary rows per chunk of the unary loss: the full logits of R * min(chunk, V) / V rows
    // at a time are what the top-K reads (the memory the unary loss's chunks take).
    int64_t chunk = 8192;
};

// Adds the selector's sums into stats (f32 [SelectorStatsLayout{block}.size()], device) and, with
// grad_weights, adds the selector's gradient with respect to hf into dh [R, D] and accumulates the
// selector parameters' gradients in `params` (a DFlash2 drafter's). Memory from ws.
void selector_loss(Backend& be, Workspace& ws, const ParamSet& params, const Dflash2Config& c,
                   const SelectorLossArgs& a, const Tensor& dh, const Tensor& stats);

}  // namespace dflash

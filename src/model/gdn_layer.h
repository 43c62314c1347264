// The Gated DeltaNet mixer of the hybrid families' linear layers (docs/formats.md "Hybrid
// linear-attention targets"), forward only: projections, the short causal convolution over the
// q|k|v channels, the gated delta rule (chunked for prefills, token by token for cached steps),
// the gated output norm and out_proj, written against the backend's gdn_* ops. Also the replay
// that rebuilds a state from a checkpoint and the rows a cached forward saved (TargetSession's
// rollback, docs/engine.md). Tested by tests/model/hybrid_forward_test.cpp and
// tests/model/hybrid_parity_test.cpp.
#pragma once

#include "model/decoder_layer.h"

namespace dflash {

// y (+)= the mixer's output for the normed rows h [S, D], from the state st, which it advances by
// the S rows: the recurrence always, the convolution cache when count (i32 [1] on the device,
// holding S) is non-empty. `save` (tensors of at least S rows) receives the rows' convolution
// inputs and the recurrence's inputs when non-null. Temporaries come from lc.ws and are given
// back.
void gdn_mixer_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& h,
                       const LinearState& st, LinearMode mode, const Tensor& count,
                       const LinearSaved* save, const Tensor& y, bool accumulate);

// Applies the first count[0] (i32 [1] on the device) saved rows to st: the convolution cache
// rolls forward over their raw inputs and the recurrence runs over their saved inputs, with the
// same ops and arithmetic as the forward that saved them (so the state equals the one that
// forward would have reached after those rows).
void gdn_replay(Backend& be, const LinearSaved& saved, const LinearState& st, const Tensor& count);

}  // namespace dflash

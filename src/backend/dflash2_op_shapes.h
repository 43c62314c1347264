// Argument checks the DFlash2 op families share across backends (dtypes and devices are each
// backend's own business): the grouped dynamic convolution, the selector's pair scores and top-K
// over the vocabulary, and the selector loss family (backend.h states their semantics). A violation
// is a dflash::Error naming the op, the tensor and what was expected. Tested by
// tests/ops/{dyn_conv,selector_scores,topk}_ test.cpp and their CUDA twins.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "core/tensor.h"

namespace dflash {

struct DynConvDims {
    int64_t R = 0, D = 0, k = 0, G = 0, S = 0;  // rows, channels, taps, groups, channels per group
};
// x [R, D], base [2, k, D], delta [R, 2*k*G] with G dividing D, half 0 or 1, block_size >= 1
// dividing R; y (or dx) shaped like x when given.
DynConvDims check_dyn_conv_shapes(const Tensor& x, const Tensor& base, const Tensor& delta,
                                  int64_t half, int64_t block_size, const Tensor& y,
                                  const char* op);

struct SelectorDims {
    int64_t P = 0, Kp = 0, K = 0, r = 0, V = 0;
};
// z [P, r], pred i32 [P, Kp], cand i32 [P, K], a and bc [V, r], scores f32 [P, Kp, K].
SelectorDims check_selector_shapes(const Tensor& z, const Tensor& pred, const Tensor& cand,
                                   const Tensor& a, const Tensor& bc, const Tensor& scores,
                                   const char* op);

// x f32 [R, V], values f32 [R, K], indices i32 [R, K], 1 <= K <= V.
void check_topk_shapes(const Tensor& x, const Tensor& values, const Tensor& indices);

// The selector loss family (Backend::selector_inject, selector_ce, selector_stats,
// selector_unary_bwd): R rows, K candidates, and dtypes of the i32 and f32 arguments (both backends
// keep these in f32 / i32; only selector_unary_bwd's w is the compute dtype).
struct SelectorLossDims {
    int64_t R = 0, K = 0;
};
SelectorLossDims check_selector_inject_shapes(const Tensor& logits, const Tensor& labels,
                                              const Tensor& values, const Tensor& ids,
                                              const Tensor& label_pos, const Tensor& hit);
SelectorLossDims check_selector_ce_shapes(const SelectorCeArgs& a);
int64_t check_selector_stats_shapes(const Tensor& loss_rows, const Tensor& pick,
                                    const Tensor& label_pos, const Tensor& hit,
                                    const Tensor& weights, int64_t block, const Tensor& stats);
SelectorLossDims check_selector_unary_bwd_shapes(const Tensor& dvalues, const Tensor& ids,
                                                 const Tensor& w, const Tensor& out);

}  // namespace dflash

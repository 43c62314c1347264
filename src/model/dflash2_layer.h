// The DFlash2 drafter layer, at inference and in training (docs/formats.md "DFlash2 drafter
// directory"): the Qwen3 pre-norm layer of decoder_layer.h with a grouped dynamic causal
// convolution around each sublayer,
//   h = input_ln(x); d = attention_conv.kernel_projection(h);
//   x1 = x + conv_after(o_proj(attn(conv_before(h))));   (both kernels use d, taken from h)
//   h2 = post_ln(x1); e = mlp_conv.kernel_projection(h2);
//   out = x1 + conv_after(mlp(conv_before(h2)));
// The convolved h feeds q_proj and the block's own k_proj/v_proj; the context K/V (target
// features) are not convolved. The drafter's attention honours its layer's causality and
// sliding window (DraftAttention). Tested by tests/model/dflash2_drafter_test.cpp.
#pragma once

#include "model/decoder_layer.h"

namespace dflash {

// One sublayer's convolution: base_kernel [2, k, D] (0: before the sublayer, 1: after) and
// kernel_projection.weight [2*k*G, D].
struct ConvWeights {
    Tensor base;
    Tensor proj;
};
struct Dflash2LayerWeights {
    ConvWeights attn, mlp;
};
// prefix: "layers.3.". The grads' views are empty when the ParamSet computes no gradients.
Dflash2LayerWeights dflash2_layer_weights(const ParamSet& p, const std::string& prefix);
Dflash2LayerWeights dflash2_layer_grads(const ParamSet& p, const std::string& prefix);

// How a drafter layer's block queries see the keys (docs/formats.md "DFlash2 drafter directory"):
// query at absolute position qpos sees key kpos iff (causal => kpos <= qpos) and (window > 0 =>
// qpos - kpos < window and, when not causal, kpos - qpos < window).
struct DraftAttention {
    bool causal = false;
    int64_t window = 0;  // 0: no window
};

// Attention of the block queries q [Sq, H, Dh] (the last Sq of the n = kv_len cache rows) over
// cache rows [0, n), into out [Sq, H*Dh]. A window that hides no key (n <= window) is the plain
// mask over kv_len; a window that does is applied one query row at a time over the key rows it
// sees (eager only: the split depends on n, known on the host).
void draft_attention(const LayerContext& lc, const Tensor& q, const LayerKvCache& cache, int64_t n,
                     const Tensor& kv_len, const DraftAttention& att, const Tensor& out);

// layer_forward_cached of a DFlash2 layer over one block x [Sq, D] (Sq = the block size: the
// convolution's taps stop at row 0). out may alias x.
// cache_len: the rows before the block (host, for draft_attention's window); row0 (i32 [1],
// device): the same, where the block's K/V are written.
void dflash2_layer_forward_cached(const LayerContext& lc, const LayerWeights& w,
                                  const Dflash2LayerWeights& cw, const Tensor& x, const Tensor& pos,
                                  LayerKvCache& cache, int64_t cache_len, const Tensor& row0,
                                  const Tensor& kv_len, const DraftAttention& att,
                                  const Tensor& out);

// Training (the DFlash block mask over [context ; N blocks of block_size rows]): the layer's
// activations. core holds the shared cores' (decoder_layer.h): x, rstd1, x1, rstd2, and core.h /
// core.h2 = the convolved normed inputs the cores read.
struct Dflash2Acts {
    LayerActs core;
    Tensor h, delta, o;    // [R, D] input_layernorm(x), [R, 2kG], [R, D] o_proj output
    Tensor h2, delta2, m;  // [R, D] post_attention_layernorm(x1), [R, 2kG], [R, D] down output
};

// layer_forward_train of a DFlash2 layer: rows x [R, D] are whole blocks of block_size rows (the
// convolution's taps stop at each block's first row). out may not alias x.
void dflash2_layer_forward_train(const LayerContext& lc, const LayerWeights& w,
                                 const Dflash2LayerWeights& cw, const Tensor& x, const Tensor& ctx,
                                 const Tensor& q_pos, const Tensor& kv_pos, const AttnMask& mask,
                                 int64_t block_size, Dflash2Acts& acts, const Tensor& out);
// Its backward (as layer_backward): g / cg the layer's gradients (f32, +=), dx overwritten, dctx
// (f32) +=.
void dflash2_layer_backward(const LayerContext& lc, const LayerWeights& w, const LayerWeights& g,
                            const Dflash2LayerWeights& cw, const Dflash2LayerWeights& cg,
                            const Dflash2Acts& acts, const Tensor& q_pos, const Tensor& kv_pos,
                            const AttnMask& mask, int64_t block_size, const Tensor& dout,
                            const Tensor& dx, const Tensor& dctx);

}  // namespace dflash

// One Qwen3/Llama/Qwen3-MoE/gpt-oss pre-norm decoder layer, written once against the Backend op
// set and shared by the
// target and the DFlash drafter (docs/formats.md "DFlash drafter directory"). The layer attends
// from its query rows x to keys and values computed from [ctx ; norm(x)]: the target passes no ctx
// (plain self-attention); the drafter passes its projected target features as ctx ("KV injection":
// context rows go through k_proj/k_norm/RoPE and v_proj only, never through Q, o_proj or the MLP).
// Tested by tests/model/decoder_layer_test.cpp (finite differences) and the model tests.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "model/hf_config.h"
#include "model/params.h"
#include "model/prepared_weights.h"

namespace dflash {

struct LayerDims {
    int64_t D, H, Hkv, Dh, I;
    float eps;
    bool qk_norm;
    bool qkv_bias;  // Qwen2, or attention_bias
    bool o_bias;    // attention_bias (Llama/Qwen3 semantics)
    // YaRN scales cos and sin by an attention factor f, so q·k by f²: applied to q after RoPE
    // (rope_attention_factor squared; 1 for other ropes).
    float q_scale = 1.0f;
    // MoE layers (TargetConfig::is_moe_layer): E experts of width Ie, k per token.
    int64_t E = 0, k = 0, Ie = 0;
    bool gpt_oss_router = false;  // top-k logits then softmax over k (else softmax then top-k)
    bool norm_topk = false;       // softmax-then-top-k: divide the k weights by their sum
    float swiglu_limit = 0;       // gpt-oss's clamped SwiGLU (0: plain SwiGLU)
    // The hybrid families (TargetConfig::hybrid): the shared expert's width (0: none) and the
    // Gated DeltaNet dims of their linear layers (model/gdn_layer.h).
    int64_t Is = 0;
    int64_t lin_hk = 0, lin_dk = 0, lin_hv = 0, lin_dv = 0, lin_kernel = 0;
    int64_t lin_conv_dim() const { return 2 * lin_hk * lin_dk + lin_hv * lin_dv; }  // C
};
LayerDims layer_dims(const TargetConfig& cfg);

// Views of one layer's parameters (or of their gradients) inside a ParamSet.
struct LayerWeights {
    Tensor input_ln;        // [D]
    Tensor wq, wk, wv;      // [H*Dh, D], [Hkv*Dh, D], [Hkv*Dh, D]
    Tensor bq, bk, bv, bo;  // [H*Dh], [Hkv*Dh], [Hkv*Dh], [D] when the model has biases
    Tensor q_norm, k_norm;  // [Dh] (qwen3 only; empty for llama)
    Tensor wq_gate;         // [H*Dh, D]: the hybrid families' output gate rows of q_proj, or empty
    Tensor wo;              // [D, H*Dh]
    Tensor post_ln;         // [D]
    Tensor w_gate, w_up;    // [I, D] (dense layers)
    Tensor w_down;          // [D, I] (dense layers)
    // MoE layers instead (tensor_layout.h: the model's expert layout):
    Tensor router, router_bias;   // [E, D]; [E] (gpt-oss) or empty
    Tensor experts_gate_up;       // [E, 2Ie, D]: each expert's gate rows, then its up rows
    Tensor experts_gate_up_bias;  // [E, 2Ie] (gpt-oss) or empty
    Tensor experts_down;          // [E, D, Ie]
    Tensor experts_down_bias;     // [E, D] (gpt-oss) or empty
    // Or the two matrices as MXFP4 (backend/ops.h: MoeExperts), set by the model when its
    // experts stay packed (model/expert_weights.h: PackedExperts); then the two above are empty.
    Tensor experts_gate_up_blocks, experts_gate_up_scales, experts_down_blocks, experts_down_scales;
    // The hybrid families' shared expert (a SwiGLU MLP of width Is every token uses, scaled by
    // sigmoid(h2 · shared_gateᵀ)), or empty.
    Tensor shared_gate_proj, shared_up_proj;  // [Is, D]
    Tensor shared_down_proj;                  // [D, Is]
    Tensor shared_gate;                       // [1, D]
    // A Gated DeltaNet layer's mixer instead of attention (wq etc. empty then).
    Tensor lin_qkv;       // [C, D], C = 2*Hk*dk + Hv*dv: q, k, v of every head
    Tensor lin_z;         // [Hv*dv, D]: the output norm's gate
    Tensor lin_b, lin_a;  // [Hv, D]: beta and decay inputs
    Tensor lin_conv;      // [C, K]: the causal convolution (conv1d.weight [C, 1, K] viewed)
    Tensor lin_a_log;     // [Hv]
    Tensor lin_dt_bias;   // [Hv]
    Tensor lin_norm;      // [dv]: the output norm (a plain scale, not 1 + w)
    Tensor lin_out;       // [D, Hv*dv]
    bool linear() const { return !lin_qkv.empty(); }
    // gpt-oss: f32 [H] on the device, a copy of self_attn.sinks that the attention mask reads
    // (the parameter is in the compute dtype); set by the model, empty otherwise.
    Tensor sinks;
    bool moe() const { return !router.empty(); }
};
// prefix: "model.layers.3." (target) or "layers.3." (drafter). The hybrid families' norms are
// the stored w here; the target points them at its (1 + w) copies (TargetModel).
LayerWeights layer_weights(const ParamSet& p, const std::string& prefix, const LayerDims& d);
LayerWeights layer_grads(const ParamSet& p, const std::string& prefix, const LayerDims& d);

// Activations a training forward keeps for the backward pass (taken from the step's Workspace).
// Activations are in the backend's compute dtype; rstd and lse in f32.
struct LayerActs {
    int64_t Sq = 0, Sc = 0;
    Tensor x;         // [Sq, D] layer input
    Tensor ctx;       // [Sc, D] context rows (drafter) or empty
    Tensor rstd1;     // [Sq]
    Tensor h;         // [Sq, D] input_layernorm(x) (DFlash2: its convolution)
    Tensor kv_in;     // [Sc+Sq, D] = [ctx ; h]
    Tensor q_lin;     // [Sq, H*Dh] before q_norm
    Tensor rstd_q;    // [Sq*H] (q itself is recomputed: Note [q recomputed])
    Tensor k_lin;     // [Sc+Sq, Hkv*Dh]
    Tensor rstd_k;    // [(Sc+Sq)*Hkv]
    Tensor k;         // [Sc+Sq, Hkv, Dh] after k_norm and RoPE
    Tensor v;         // [Sc+Sq, Hkv, Dh]
    Tensor attn;      // [Sq, H*Dh]
    Tensor lse;       // [H, Sq]
    Tensor x1;        // [Sq, D] after the attention residual
    Tensor rstd2;     // [Sq]
    Tensor h2;        // [Sq, D] DFlash2's convolution of post_attention_layernorm(x1); empty
                      // after layer_forward_train (Note [h2 recomputed])
    Tensor gate, up;  // [Sq, I] (their SwiGLU is recomputed: Note [SwiGLU recomputed])
};

// RoPE's inverse frequencies (rope_inv_freq; yarn_inv_freq for YaRN) as an f32 [R/2] tensor on
// be's device, R = rotary_dim (head_dim, or fewer for a partial rotary).
DeviceTensor upload_inv_freq(Backend& be, const RopeConfig& rope, int64_t rotary_dim);

// Where a decode block's product goes through Backend::rows_linear rather than the general GEMMs
// (rows_linear_pays). The defaults are where the decode step measured faster with rows_linear
// than with cuBLASLt's 16-row GEMMs on an H200 (docs/performance.md, "rows_linear: bytes in
// flight"): products of at most 256 MiB that merge several weights (an 8B target's q/k/v, its
// gate/up pair with SwiGLU) or whose weight is at most 16 MiB. A larger single weight (an 8B
// target's o_proj and down, every LM head) reads as fast or faster through cuBLASLt.
struct RowsLimits {
    int64_t max_product_bytes = int64_t{256} << 20;
    int64_t max_single_bytes = int64_t{16} << 20;
};

// What every layer call runs on: the backend (real, or the planning one while a step is sized),
// the step's workspace, the layer sizes and RoPE's inverse frequencies (f32 [Dh/2] on the device).
struct LayerContext {
    Backend& be;
    Workspace& ws;
    const LayerDims& dims;
    const Tensor& inv_freq;
    // Drafting: the weights' bf16 copies the cached forward multiplies with (null: every product
    // reads its weight in place).
    const PreparedWeights* prepared = nullptr;
    // Decode and verify blocks (at most kRowsLinearMaxRows rows) of plain attention layers
    // through the fused decode-block ops (Backend::rows_linear, qk_norm_rope_cache: nine launches
    // a layer instead of about twenty). Row invariant either way; the two ways differ in
    // rounding, so an engine uses one of them for its whole life (TargetSession).
    bool rows_ops = false;
    RowsLimits rows_limits{};  // which of those products take rows_linear
};

// Whether a decode block's product over `weights` goes through Backend::rows_linear (rather than
// the general GEMMs) under `limits`, decided by the weights' sizes alone, so a decode step and a
// verify block take the same way (row invariance).
bool rows_linear_pays(const RowsLimits& limits, std::initializer_list<Tensor> weights);

// Training forward. q_pos i32 [Sq], kv_pos i32 [Sc+Sq] (positions of [ctx ; x]), on the device.
// out [Sq, D] may not alias x. Activations are taken from lc.ws and stay there for the backward.
void layer_forward_train(const LayerContext& lc, const LayerWeights& w, const Tensor& x,
                         const Tensor& ctx, const Tensor& q_pos, const Tensor& kv_pos,
                         const AttnMask& mask, LayerActs& acts, const Tensor& out);

// The training mask of one drafter layer (docs/training.md "Sliding-window drafter layers"): the
// dflash_block mask `blocks` with the layer's window (0: none) and causality, so each query sees
// the keys decoding over the cache gives it. DFlash, DFlash2 and DSpark drafters build their
// per-layer masks with it (DrafterConfig::layer_window / layer_causal).
inline AttnMask drafter_layer_mask(const AttnMask& blocks, int64_t window, bool causal) {
    return blocks.with_window(window).with_causal_block(causal);
}

// Backward of layer_forward_train: accumulates parameter gradients (f32) into g, overwrites dx
// [Sq, D], and adds the context gradient into dctx [Sc, D] (f32, +=) when Sc > 0. Its
// temporaries are given back to lc.ws before it returns. It overwrites acts' gate and up (Note
// [SwiGLU recomputed]): one backward per forward.
void layer_backward(const LayerContext& lc, const LayerWeights& w, const LayerWeights& g,
                    const LayerActs& acts, const Tensor& q_pos, const Tensor& kv_pos,
                    const AttnMask& mask, const Tensor& dout, const Tensor& dx, const Tensor& dctx);

// The layer's two sublayer cores, shared with the DFlash2 layer (dflash2_layer.h), which wraps
// them in its convolutions. Attention: from the rows hq [Sq, D] that feed q_proj and the block's
// own k/v_proj (the normed layer input; ctx rows go before them as in layer_forward_train) to the
// o_proj output written into o [Sq, D] (added to it when accumulate). Fills acts.{Sq, Sc, ctx, h
// (= hq), kv_in, q_lin, rstd_q, k_lin, rstd_k, k, v, attn, lse}.
// kv_in: the caller's [Sc+Sq, D] buffer whose last Sq rows are hq, where ctx is copied in front of
// them (K and V are projected from it); empty: one is taken from lc.ws.
void attention_core_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& hq,
                            const Tensor& ctx, const Tensor& q_pos, const Tensor& kv_pos,
                            const AttnMask& mask, LayerActs& acts, const Tensor& o, bool accumulate,
                            const Tensor& kv_in = Tensor());
// MLP: y (+)= down(silu(gate(h2)) * up(h2)); fills acts.{h2 (= h2), gate, up}.
void mlp_core_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& h2,
                      LayerActs& acts, const Tensor& y, bool accumulate);
// Backwards of the cores: from the gradient at o (d_o) to dhq [Sq, D] (overwritten), adding into
// dctx (f32) and the weight gradients; from the gradient at y (dy) to dh2 (overwritten). Their
// temporaries stay in lc.ws (the caller releases them). mlp_core_backward overwrites acts.gate and
// acts.up with their gradients (Note [SwiGLU recomputed] in decoder_layer.cpp): one backward per
// forward.
void attention_core_backward(const LayerContext& lc, const LayerWeights& w, const LayerWeights& g,
                             const LayerActs& acts, const Tensor& q_pos, const Tensor& kv_pos,
                             const AttnMask& mask, const Tensor& d_o, const Tensor& dhq,
                             const Tensor& dctx);
void mlp_core_backward(const LayerContext& lc, const LayerWeights& w, const LayerWeights& g,
                       const LayerActs& acts, const Tensor& dy, const Tensor& dh2);

// A Gated DeltaNet layer's recurrent state (model/gdn_layer.h): conv f32 [K-1, C] (the last K-1
// raw inputs of the convolution), ssm f32 [Hv, dk, dv].
struct LinearState {
    Tensor conv, ssm;
};
// What a cached linear layer saves of its rows for a later replay (TargetSession::crop): the raw
// convolution inputs qkv [n, C] (compute dtype) and the recurrence's inputs q, k f32 [n, Hk, dk],
// v f32 [n, Hv, dv], g, beta f32 [n, Hv]. Empty: nothing saved.
struct LinearSaved {
    Tensor qkv, q, k, v, g, beta;
};
// Which form of the recurrence a linear layer runs: chunked (prefills, full forwards) or token
// by token (decode, verify blocks).
enum class LinearMode { chunked, recurrent };

// A hybrid family's linear layer, h = x + deltanet(input_ln(x)), out = h + mlp(post_ln(h)), over
// the rows x [S, D] from the state st, which it advances by all S rows (`count` i32 [1] on the
// device holds S: the conv cache's roll). `save` (its tensors' rows [0, S)) receives the rows'
// inputs when non-null. out may alias x. Temporaries come from lc.ws and are given back.
void linear_layer_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& x,
                          const LinearState& st, LinearMode mode, const Tensor& count,
                          const LinearSaved* save, const Tensor& out);

// One layer's KV cache: rows [0, len) hold K (after norm and RoPE) and V, in the compute dtype.
struct LayerKvCache {
    DeviceTensor k;  // [capacity, Hkv, Dh]
    DeviceTensor v;  // [capacity, Hkv, Dh]
};

// Cache positions live in device memory (i32 [1] tensors), so a decode step is the same step at
// every position and one captured graph serves them all; the caller checks the capacity.

// Drafter context ("KV injection" at inference): K/V of the context rows ctx [T, D] (k_proj,
// k_norm, RoPE at positions pos i32 [T]; v_proj) written at cache rows row0[0]..row0[0]+T-1.
void layer_append_context(const LayerContext& lc, const LayerWeights& w, const Tensor& ctx,
                          const Tensor& pos, LayerKvCache& cache, const Tensor& row0);

// Inference forward over a cache: K/V of norm(x) are written at rows row0[0] .. row0[0]+Sq-1
// (positions pos i32 [Sq]), then x's queries attend over the cache's first kv_len[0] rows with
// `kind` (causal: query i sits at row kv_len[0]-Sq+i; full: every row). row0 and kv_len are i32
// [1] on the device. The caller advances or crops its length. out may alias x. Temporaries come
// from lc.ws and are given back. window > 0 (causal): each query sees its `window` most recent
// keys, itself included (gpt-oss's sliding layers); the layer's sinks join its softmax.
void layer_forward_cached(const LayerContext& lc, const LayerWeights& w, const Tensor& x,
                          const Tensor& pos, LayerKvCache& cache, const Tensor& row0,
                          const Tensor& kv_len, AttnMaskKind kind, const Tensor& out,
                          int64_t window = 0);

}  // namespace dflash

// The shape contracts of the ops (backend/op_list.h), one section per op family in the list's
// order, each checked by ONE function that the CPU reference and the CUDA op both call first, so
// a bad argument fails with the same message on every backend. A check covers shapes, scalar
// arguments and the dtypes every backend shares (i32 ids, f32 statistics); the compute dtype
// and the device are each backend's own business, and so are kernel limits (CUDA's widest
// RMSNorm row, supported head dims) and checks that read tensor values (ids in range). A
// violation is a dflash::Error naming the op, the tensors and what was expected. Several checks
// return the sizes they derived, which the ops use. Tested by the wrong-argument cases of
// tests/ops/<family>_test.cpp and tests/cuda/<family>_cuda_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/ops.h"
#include "core/tensor.h"

namespace dflash {

// ---- copies on the device ---------------------------------------------------------------------
// copy: dst and src of equal element counts.
void check_copy_shapes(const Tensor& dst, const Tensor& src);
// copy_columns: dst [R, W] and src [R, C] of one dtype, 0 <= col, col + C <= W.
void check_copy_columns_shapes(const Tensor& dst, int64_t col, const Tensor& src);
// write_rows: dst and src of one dtype with equal rows' shape (all but the first dimension);
// row0 i32 [1]. Returns the bytes of one row.
size_t check_write_rows_args(const Tensor& dst, const Tensor& row0, const Tensor& src);

// ---- GEMM ---------------------------------------------------------------------------------------
// C [m, n] = op(A) [m, k] · op(B) [k, n]; tensors of rank > 2 are viewed as [numel/last, last].
struct GemmDims {
    int64_t m = 0, n = 0, k = 0;
};
GemmDims check_gemm_shapes(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                           const Tensor& c);

// ---- the decode block (op_shapes_rows.cpp)
// ------------------------------------------------------- rows_linear: x [R, K] with 1 <= R <=
// kRowsLinearMaxRows; w.w[0] [N_0, K] and, by epilogue: store: w[1], w[2] [N_i, K] or empty (w[2]
// only after w[1]), y [R, sum N_i]; add: w[1], w[2] empty, residual and y [R, N_0]; swiglu: w[1]
// [N_0, K], w[2] empty, y [R, N_0]. residual empty unless add. Weights of x's dtype. Returns the
// columns of y.
int64_t check_rows_linear_shapes(const Tensor& x, const RowsLinear& w, const Tensor& residual,
                                 const Tensor& y);
// qk_norm_rope_cache: q_out [R, H, Dh], caches [C, Hkv, Dh] (H a multiple of Hkv), qkv
// [R, (H + 2 Hkv) Dh] of q_out's dtype, q_norm / k_norm [Dh] or empty, positions i32 [R],
// inv_freq as rope_fwd's, row0 i32 [1], eps > 0.
void check_qk_norm_rope_cache_shapes(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                                     float eps, const Tensor& positions, const Tensor& inv_freq,
                                     const Tensor& q_out, const Tensor& k_cache,
                                     const Tensor& v_cache, const Tensor& row0);

// ---- embedding ----------------------------------------------------------------------------------
// table [V, D]; rows (out or dout) holding ids.numel() rows of D.
void check_embedding_shapes(const Tensor& table, const Tensor& ids, const Tensor& rows,
                            const char* op, const char* table_name, const char* rows_name);

// ---- RMSNorm ------------------------------------------------------------------------------------
// x viewed as [R, C] with C = w.numel() > 0 its last dim; y (dy, dx) shaped like x; rstd [R] or
// empty (the backward needs it); dw of w's element count. Return R.
int64_t check_rmsnorm_fwd_shapes(const Tensor& x, const Tensor& w, const Tensor& y,
                                 const Tensor& rstd);
int64_t check_rmsnorm_bwd_shapes(const Tensor& dy, const Tensor& x, const Tensor& w,
                                 const Tensor& rstd, const Tensor& dx, const Tensor& dw);

// ---- RoPE ---------------------------------------------------------------------------------------
// x [S, H, Dh] with Dh even, positions i32 [S], inv_freq [R/2] with 2 <= R <= Dh (R < Dh: partial
// rotary). op: rope_fwd or rope_bwd.
void check_rope_shapes(const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
                       const char* op);

// ---- attention ----------------------------------------------------------------------------------
struct AttentionDims {
    int64_t sq = 0, sk = 0, h = 0, hkv = 0, dh = 0;  // Sk: the rows of k (a cache's capacity)
};
// q [Sq, H, Dh], k and v [Sk, Hkv, Dh] with Dh > 0 and H a positive multiple of Hkv; out (dout,
// dq) shaped like q, dk and dv like k; lse f32 [H, Sq] or empty (the backward needs it). The
// mask's sizes: kv_len i32 [1] only with a causal or full mask; without kv_len a causal mask
// needs q_offset + Sq <= Sk; a dflash_block mask needs Sq = N * block_size, Sk = ctx_len + Sq,
// anchors i32 [N] and ctx_start i32 [N] or empty (at least N entries are read); window >= 0,
// nonzero only with a causal mask; sinks f32 [H] or empty, and empty in the backward. What the
// mask's tensors hold is checked where it can be read (the CPU reference).
AttentionDims check_attention_fwd_shapes(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const AttnMask& mask, const Tensor& out,
                                         const Tensor& lse);
AttentionDims check_attention_bwd_shapes(const Tensor& dout, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& out, const Tensor& lse,
                                         const AttnMask& mask, const Tensor& dq, const Tensor& dk,
                                         const Tensor& dv);

// ---- gating -------------------------------------------------------------------------------------
// sigmoid_mul: gate and y shaped like x.
void check_sigmoid_mul_shapes(const Tensor& x, const Tensor& gate, const Tensor& y);
// add_sigmoid_scaled: y of rank >= 1 viewed as [R, C] (R = its first dim), x shaped like y, s of
// R elements. Returns R.
int64_t check_add_sigmoid_scaled_shapes(const Tensor& y, const Tensor& x, const Tensor& s);
// sigmoid_mul_bwd: dy, x, gate, dx, dgate of one shape of rank >= 1 viewed as [R, C] (C its last
// dim); dgate_sum of C elements or empty. Returns C.
int64_t check_sigmoid_mul_bwd_shapes(const Tensor& dy, const Tensor& x, const Tensor& gate,
                                     const Tensor& dx, const Tensor& dgate,
                                     const Tensor& dgate_sum);
// ---- SwiGLU -------------------------------------------------------------------------------------
// Every tensor shaped like gate.
void check_swiglu_fwd_shapes(const Tensor& gate, const Tensor& up, const Tensor& out);
void check_swiglu_bwd_shapes(const Tensor& dout, const Tensor& gate, const Tensor& up,
                             const Tensor& dgate, const Tensor& dup);

// ---- element-wise -------------------------------------------------------------------------------
// add_inplace: y and x of equal element counts (contiguous: a [S, H, Dh] view may be added to its
// [S, H*Dh] twin).
void check_add_inplace_shapes(const Tensor& y, const Tensor& x);
// add_row_bias: y [R, C] and bias [C], C > 0.
void check_add_row_bias_shapes(const Tensor& y, const Tensor& bias);

// ---- LM head losses -----------------------------------------------------------------------------
// lm_head_ce: h [R, D] and w [V, D] (V >= 1) of the backend's dtypes (checked by the caller);
// labels i32 [R], weights f32 [R], chunk >= 1; the outputs asked for: loss_rows f32 [R], argmax
// i32 [R], dh shaped like h, dw f32 shaped like w.
void check_lm_head_ce_shapes(const Tensor& h, const Tensor& w, const Tensor& labels,
                             const Tensor& weights, int64_t chunk, const LmHeadCeOut& out);
// lm_head_kl: as lm_head_ce without labels, the teacher's t of h's dtype and shape, and a
// divergence mix of finite weights >= 0, not all 0.
void check_lm_head_kl_shapes(const Tensor& h, const Tensor& t, const Tensor& w,
                             const Tensor& weights, int64_t chunk, const LmHeadDivergences& div,
                             const LmHeadKlOut& out);

// ---- DSpark's confidence loss ------------------------------------------------------------------
// confidence_bce: z of R elements; tv, weights, loss_rows f32 of R; with a gradient grad_weights
// f32 of R, dz of R elements and dbias f32 [1] or empty; without one, grad_weights, dz and dbias
// all empty. Returns R.
int64_t check_confidence_bce_args(const Tensor& z, const Tensor& tv, const Tensor& weights,
                                  const Tensor& grad_weights, const Tensor& loss_rows,
                                  const Tensor& dz, const Tensor& dbias);

// ---- training statistics and the optimizer --------------------------------------------------
// loss_stats: loss_rows and weights f32 [R], argmax and labels i32 [R], period >= 1, stats f32
// [LossStatsLayout{period}.size()]. Returns R.
int64_t check_loss_stats_shapes(const Tensor& loss_rows, const Tensor& argmax, const Tensor& labels,
                                const Tensor& weights, int64_t period, const Tensor& stats);
// dpace_weights: ce, weights and out f32 [R], R a multiple of block >= 1, 0 < alpha <= 1.
// Returns R.
int64_t check_dpace_weights_args(const Tensor& ce, const Tensor& weights, int64_t block,
                                 float alpha, const Tensor& out);
// t holds exactly one element (sum_squares' out, clip_scale's norm_sq and scale).
void check_one_element(const Tensor& t, const char* op, const char* name);
// adamw_step: master, grad, m, v (and value, when given) of equal element counts; grad_scale
// [1] or empty; p.scalars [3] or empty; step >= 1; betas in [0, 1).
void check_adamw_args(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                      const AdamWParams& p, const Tensor& grad_scale, const Tensor& value);
// Muon's element-wise ops (op_list.h): equal element counts; one-element grad_scale (or empty),
// norm_sq; scalars [2]; value empty or of master's count. Returns the element count.
int64_t check_muon_momentum_args(const Tensor& grad, const Tensor& grad_scale,
                                 const Tensor& momentum, const Tensor& update);
int64_t check_muon_normalize_args(const Tensor& x, const Tensor& norm_sq, const Tensor& out);
// add_uniform_noise: seed i32 [2] (low word, high word); on the CPU (host memory) the seed is
// returned, elsewhere 0.
uint64_t check_uniform_noise_args(const Tensor& x, const Tensor& seed);
int64_t check_muon_update_args(const Tensor& master, const Tensor& x, const Tensor& scalars,
                               const Tensor& value);

// ---- decoding -----------------------------------------------------------------------------------
// argmax_rows: x [R, V], out i32 [R].
void check_argmax_rows_shapes(const Tensor& x, const Tensor& out);
// logits f32 [R, V], uniforms f32 [R], out i32 [R]; temperature > 0, top_k >= 0, top_p in (0, 1].
void check_sample_rows_args(const Tensor& logits, const SampleParams& p, const Tensor& uniforms,
                            const Tensor& out);

// ---- DFlash2: grouped dynamic convolution ---------------------------------------------------
struct DynConvDims {
    int64_t R = 0, D = 0, k = 0, G = 0, S = 0;  // rows, channels, taps, groups, channels per group
};
// x [R, D], base [2, k, D], delta [R, 2*k*G] with G dividing D, half 0 or 1, block_size >= 1
// dividing R; y shaped like x and not x itself.
DynConvDims check_dyn_conv_fwd_shapes(const Tensor& x, const Tensor& base, const Tensor& delta,
                                      int64_t half, int64_t block_size, const Tensor& y);
// As the forward, with dy and dx shaped like x, dbase like base and ddelta like delta.
DynConvDims check_dyn_conv_bwd_shapes(const Tensor& dy, const Tensor& x, const Tensor& base,
                                      const Tensor& delta, int64_t half, int64_t block_size,
                                      const Tensor& dx, const Tensor& dbase, const Tensor& ddelta);

// ---- DSpark: the rnn Markov head's slot recurrence -----------------------------------------
struct MarkovRnnDims {
    int64_t R = 0, r = 0, C = 0;  // rows, rank, columns of j
};
// pre [R, 3r], bias [3r], j [3r, C] with C >= r, act f32 [R, 3r], out [R, r] with r >= 1,
// block_size >= 1 dividing R.
MarkovRnnDims check_markov_rnn_fwd_shapes(const Tensor& pre, const Tensor& bias, const Tensor& j,
                                          int64_t block_size, const Tensor& act, const Tensor& out);
// dout and s_prev [R, r], act f32 and dact [R, 3r], j [3r, C] with C >= r, dbias f32 [3r].
MarkovRnnDims check_markov_rnn_bwd_shapes(const Tensor& dout, const Tensor& act, const Tensor& j,
                                          int64_t block_size, const Tensor& dact,
                                          const Tensor& dbias, const Tensor& s_prev);

// ---- DFlash2: the candidate selector's pair scores and top-K --------------------------------
struct SelectorDims {
    int64_t P = 0, Kp = 0, K = 0, r = 0, V = 0;
};
// z [P, r], pred i32 [P, Kp], cand i32 [P, K], a and bc [V, r], out f32 [P, Kp, K].
SelectorDims check_selector_scores_fwd_shapes(const Tensor& z, const Tensor& pred,
                                              const Tensor& cand, const Tensor& a, const Tensor& bc,
                                              const Tensor& out);
// As the forward with dscores for out, and dz, da, dbc shaped like z, a, bc.
SelectorDims check_selector_scores_bwd_shapes(const Tensor& dscores, const Tensor& z,
                                              const Tensor& pred, const Tensor& cand,
                                              const Tensor& a, const Tensor& bc, const Tensor& dz,
                                              const Tensor& da, const Tensor& dbc);
// x f32 [R, V], values f32 [R, K], indices i32 [R, K], 1 <= K <= V.
void check_topk_shapes(const Tensor& x, const Tensor& values, const Tensor& indices);

// ---- DFlash2: the selector loss -----------------------------------------------------------------
// selector_inject, selector_ce, selector_stats, selector_unary_bwd: R rows, K candidates, and the
// dtypes of the i32 and f32 arguments (both backends keep these in f32 / i32; only
// selector_unary_bwd's w is the compute dtype).
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

// ---- mixture of experts -------------------------------------------------------------------------
struct MoeRouteDims {
    int64_t R = 0, E = 0, k = 0;  // rows (tokens), experts, picks per row
};
// logits f32 [R, E] with E >= 1, 1 <= routing.k <= E, experts i32 [R, k], weights f32 [R, k].
MoeRouteDims check_moe_route_shapes(const Tensor& logits, const MoeRouting& routing,
                                    const Tensor& experts, const Tensor& weights);
struct MoeExpertsDims {
    int64_t R = 0, D = 0, k = 0, E = 0, I = 0;  // rows, hidden, picks, experts, intermediate
};
// x [R, D], experts i32 [R, k] with k >= 1, weights f32 [R, k], out [R, D]; w.gate_up [E, 2I, D]
// and w.down [E, D, I] with E, I, D >= 1, the biases [E, 2I] / [E, D] or empty; x, out, the
// weights and the biases of one dtype; limit > 0 for clamped_swiglu. MXFP4 experts
// (w.mxfp4()): gate_up and down empty, D and I multiples of 32, u8 blocks and scales shaped as
// backend/ops.h: MoeExperts says.
MoeExpertsDims check_moe_experts_shapes(const Tensor& x, const Tensor& experts,
                                        const Tensor& weights, const MoeExperts& w,
                                        const Tensor& out);

// ---- Gated DeltaNet ----------------------------------------------------------------------------
struct GdnConvDims {
    int64_t S = 0, C = 0, K = 0;  // tokens, channels, taps
};
// gdn_conv: x [S, C], w [C, K] with K >= 2, y [S, C], x / w / y of one dtype; state f32 [K-1, C].
GdnConvDims check_gdn_conv_shapes(const Tensor& x, const Tensor& w, const Tensor& state,
                                  const Tensor& y);
// gdn_conv_advance: state f32 [K-1, C] with K >= 2, x [S, C], count i32 [1]. K is read from the
// state's rows.
GdnConvDims check_gdn_conv_advance_shapes(const Tensor& state, const Tensor& x,
                                          const Tensor& count);
struct GdnDims {
    int64_t S = 0, Hk = 0, dk = 0, Hv = 0,
            dv = 0;                            // tokens, key heads and dim, value heads and dim
    int64_t ratio() const { return Hv / Hk; }  // value heads per key head
};
// gdn_prepare: q, k f32 [S, Hk, dk], v f32 [S, Hv, dv] with Hk, dk, Hv, dv >= 1 and Hv a multiple
// of Hk; g, beta f32 [S, Hv]; conv_out [S, 2*Hk*dk + Hv*dv]; b, a [S, Hv] of conv_out's dtype;
// a_log, dt_bias [Hv] (their dtype is the backend's business).
GdnDims check_gdn_prepare_shapes(const Tensor& conv_out, const Tensor& b, const Tensor& a,
                                 const Tensor& a_log, const Tensor& dt_bias, const Tensor& q,
                                 const Tensor& k, const Tensor& v, const Tensor& g,
                                 const Tensor& beta);
// gdn_chunked / gdn_recurrent (op names either): q, k f32 [S, Hk, dk], v f32 [S, Hv, dv] with
// Hv a multiple of Hk, g, beta f32 [S, Hv], state f32 [Hv, dk, dv], o f32 [S, Hv, dv] (may be
// empty when o_optional), count i32 [1] or empty.
GdnDims check_gdn_rule_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const Tensor& o,
                              const Tensor& count, bool o_optional, const char* op);
// gdn_gated_norm: o f32 [S, Hv, dv]; z and y [S, Hv*dv] and w [dv] of one dtype; eps > 0.
// Returns S, Hv and dv (Hk and dk stay 0).
GdnDims check_gdn_gated_norm_shapes(const Tensor& o, const Tensor& z, const Tensor& w, float eps,
                                    const Tensor& y);

}  // namespace dflash

// The op set, written once: every Backend op that each backend implements the same way, as a
// free function of its own (cpu::<name>, cuda::<name>) taking the backend's Exec and then the
// op's arguments. Each entry is
//     DFLASH_OP(name, (parameters), (arguments))
// with the op's contract in the comment above it: shapes, the dtypes every backend shares, what
// is overwritten and what accumulated. All tensors are row-major and contiguous. An op's shape
// contract is checked by its check_* function in backend/op_shapes.h (grouped by family), which
// the CPU reference and the CUDA op both call (so both reject a bad shape with the same message);
// dtypes and devices differ per backend and are checked by each.
//
// No include guard: a file that needs the list defines DFLASH_OP (and DFLASH_OP_DEFAULT, for the
// one declaration that carries the callers' default arguments) and includes this file, which
// undefines both at its end. It generates the Backend virtuals (backend.h), the cpu:: and cuda::
// declarations (cpu/cpu_ops.h, cuda/cuda_ops.h), the CPU and CUDA backends' forwarders and the
// planning backend's no-ops.
//
// Adding an op: its entry here; its shape check in backend/op_shapes.{h,cpp}; its CPU reference
// in cpu/<family>.cpp; its CUDA op in cuda/<family>.cpp with kernels/<family>.{cu,h}; their tests
// (tests/ops/<family>_test.cpp, tests/cuda/<family>_cuda_test.cpp). Nothing else.
// Written by hand on Backend instead, because each backend does them its own way: memory,
// transfers and steps, prepare_bf16_weight / prepare_f32_weight / linear (an optional prepared
// weight) and the lm_head_*_workspace queries (const, returning sizes; the planning backend asks
// the real one).
// Covered by every op test (tests/ops, tests/cuda) through the declarations it generates.

#ifndef DFLASH_OP
#error "define DFLASH_OP(name, params, args) before including backend/op_list.h"
#endif
#ifndef DFLASH_OP_DEFAULT
#define DFLASH_OP_DEFAULT(value)
#endif
#ifndef DFLASH_UNPAREN
// DFLASH_UNPAREN params -> the parameters without their parentheses (to prepend an Exec).
#define DFLASH_UNPAREN(...) __VA_ARGS__
#endif

// ---- copies on the device ---------------------------------------------------------------------
// dst = src on the device, same element count; f32 <-> bf16 convert (round to nearest even),
// other dtypes must match.
DFLASH_OP(copy, (const Tensor& dst, const Tensor& src), (dst, src))
// dst[:, col : col + C] = src for dst [R, W] and src [R, C] (same dtype).
DFLASH_OP(copy_columns, (const Tensor& dst, int64_t col, const Tensor& src), (dst, col, src))
// Every element = value (f32, bf16; i32 takes the value as an integer).
DFLASH_OP(fill, (const Tensor& t, float value), (t, value))
// dst[row0[0] + i] = src[i] for every row i of src (rows: the first dimension; the rest of the
// shape and the dtype equal). row0 i32 [1] lives on the device, so the step that writes a KV
// cache row is the same step at every position (one captured graph serves them all). Rows
// that would land past dst's end are not written: callers check the capacity on the host.
DFLASH_OP(write_rows, (const Tensor& dst, const Tensor& row0, const Tensor& src), (dst, row0, src))

// ---- GEMM ---------------------------------------------------------------------------------------
// C = alpha * op(A) · op(B) + beta * C, op(X) = X or Xᵀ. A linear layer with an HF weight
// W [out, in] is gemm(x, false, W, true, y): y[M, out] = x[M, in] · Wᵀ. Tensors of rank > 2
// are viewed as [numel / last, last]. CUDA: A and B bf16, C bf16 or f32 (f32 for parameter
// gradients, accumulated with beta = 1).
DFLASH_OP(gemm,
          (const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
           float alpha DFLASH_OP_DEFAULT(1.0f), float beta DFLASH_OP_DEFAULT(0.0f)),
          (a, trans_a, b, trans_b, c, alpha, beta))

// ---- the decode block: a few rows against whole weights (backend/ops.h: RowsLinear) ----------
// The products of a decode or verify step, R <= kRowsLinearMaxRows rows (row invariance: a row's
// bits do not depend on R or on the other rows, so a decode step and a verify block agree).
// x [R, K]; each weight [N_i, K]. By epilogue (RowsEpilogue):
//   store:  y [R, N_0 + N_1 + N_2] = x · [W_0; W_1; W_2]ᵀ (y in the compute dtype or f32)
//   add:    y [R, N_0] = residual + x · W_0ᵀ (residual shaped as y; may alias it)
//   swiglu: y [R, N_0] = silu(g) * u, g = x · W_0ᵀ and u = x · W_1ᵀ each rounded to the compute
//           dtype first (as gemm + gemm + swiglu_fwd would), N_1 = N_0
// Sums in fp32. Unused weights are empty. The weights are constants of the step: with
// programmatic dependent launch a backend may start reading them before the op before this one
// has finished, so no op of the step may write them.
DFLASH_OP(rows_linear,
          (const Tensor& x, const RowsLinear& w, const Tensor& residual, const Tensor& y),
          (x, w, residual, y))
// A decode block's attention inputs from its fused projection qkv [R, (H + 2 Hkv) * Dh] (q heads,
// then k heads, then v heads): q_out [R, H, Dh] = rope(norm(q)); cache rows row0[0] + r of k_cache
// [C, Hkv, Dh] = rope(norm(k)) and of v_cache = v. norm is the per-head RMSNorm over Dh with
// q_norm / k_norm [Dh] (skipped when empty), rounded to the compute dtype before RoPE, as
// rmsnorm_fwd then rope_fwd would; positions i32 [R] and inv_freq as rope_fwd. row0 i32 [1] on
// the device (as write_rows); rows past the cache's end are not written.
DFLASH_OP(qk_norm_rope_cache,
          (const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm, float eps,
           const Tensor& positions, const Tensor& inv_freq, const Tensor& q_out,
           const Tensor& k_cache, const Tensor& v_cache, const Tensor& row0),
          (qkv, q_norm, k_norm, eps, positions, inv_freq, q_out, k_cache, v_cache, row0))

// ---- embedding ----------------------------------------------------------------------------------
// out[S, D] = table[ids[s]]; ids i32 [S], table [V, D].
DFLASH_OP(embedding_fwd, (const Tensor& table, const Tensor& ids, const Tensor& out),
          (table, ids, out))
// dtable[ids[s]] += dout[s]; dtable f32. Deterministic (no floating-point atomics).
DFLASH_OP(embedding_bwd, (const Tensor& ids, const Tensor& dout, const Tensor& dtable),
          (ids, dout, dtable))

// ---- RMSNorm ------------------------------------------------------------------------------------
// RMSNorm over the last dim C = w.numel(); x, y viewed as [R, C]; rstd f32 [R] (may be empty).
// w in the compute dtype, or (forward) f32: the hybrid families' (1 + w) scales (TargetModel).
DFLASH_OP(rmsnorm_fwd,
          (const Tensor& x, const Tensor& w, float eps, const Tensor& y, const Tensor& rstd),
          (x, w, eps, y, rstd))
// dx overwritten, dw (f32) accumulated (+=). rstd from the forward.
DFLASH_OP(rmsnorm_bwd,
          (const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd, const Tensor& dx,
           const Tensor& dw),
          (dy, x, w, rstd, dx, dw))

// ---- RoPE ---------------------------------------------------------------------------------------
// In place on x [S, Hx, Dh] with positions i32 [S]; inv_freq f32 [Dh/2] (rope_inv_freq, on
// this device). Angles, cos and sin in f32 as the HF reference computes them. Partial rotary
// (the hybrid families): inv_freq f32 [R/2] with R < Dh turns the first R dims of each head
// (pairs i, i + R/2) and leaves dims R.. as they are.
DFLASH_OP(rope_fwd, (const Tensor& x, const Tensor& positions, const Tensor& inv_freq),
          (x, positions, inv_freq))
// In place on dx: the transpose of the rotation (rotation by the negative angle).
DFLASH_OP(rope_bwd, (const Tensor& dx, const Tensor& positions, const Tensor& inv_freq),
          (dx, positions, inv_freq))

// ---- attention ----------------------------------------------------------------------------------
// q [Sq, H, Dh], k/v [Sk, Hkv, Dh], out [Sq, H, Dh], lse f32 [H, Sq] (may be empty).
// GQA: head h reads kv head h / (H / Hkv). Scale Dh^-1/2. A row that sees no key gets out 0 and
// lse -inf. See AttnMask for which keys a query sees.
DFLASH_OP(attention_fwd,
          (const Tensor& q, const Tensor& k, const Tensor& v, const AttnMask& mask,
           const Tensor& out, const Tensor& lse),
          (q, k, v, mask, out, lse))
// dq, dk, dv overwritten. Deterministic.
DFLASH_OP(attention_bwd,
          (const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
           const Tensor& lse, const AttnMask& mask, const Tensor& dq, const Tensor& dk,
           const Tensor& dv),
          (dout, q, k, v, out, lse, mask, dq, dk, dv))

// ---- SwiGLU -------------------------------------------------------------------------------------
// out = silu(gate) * up over [R, I]. dgate, dup overwritten.
DFLASH_OP(swiglu_fwd, (const Tensor& gate, const Tensor& up, const Tensor& out), (gate, up, out))
DFLASH_OP(swiglu_bwd,
          (const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
           const Tensor& dup),
          (dout, gate, up, dgate, dup))

// ---- element-wise -------------------------------------------------------------------------------
// y += alpha * x (residual add, gradient accumulation; y may be f32 with x bf16); y *= alpha.
DFLASH_OP(add_inplace, (const Tensor& y, const Tensor& x, float alpha DFLASH_OP_DEFAULT(1.0f)),
          (y, x, alpha))
DFLASH_OP(scale_inplace, (const Tensor& y, float alpha), (y, alpha))
// x += amplitude * (2 u - 1) (f32 or bf16 x; the sum in f32), u = uniform_hash01(seed, i) for
// element i (backend/noise_hash.h), seed the two i32 words of a 64-bit seed on the device, so a
// recorded step draws new noise from each step's staged seed. The same numbers on every backend.
DFLASH_OP(add_uniform_noise, (const Tensor& x, const Tensor& seed, float amplitude),
          (x, seed, amplitude))
// x[i] = stddev * normal_hash(seed, i) for every element i (backend/noise_hash.h): N(0, stddev²)
// numbers that are a pure function of (seed, i), the same on every backend and thread split, so
// random weights are drawn on the device that holds them (ParamSet::init_random). f32 or bf16 x
// (bf16: the f32 value rounded).
DFLASH_OP(fill_normal_hash, (const Tensor& x, uint64_t seed, float stddev), (x, seed, stddev))
// y [R, C] += bias [C] on every row (Qwen2's q/k/v projection biases).
DFLASH_OP(add_row_bias, (const Tensor& y, const Tensor& bias), (y, bias))

// ---- gating (the hybrid families' output gates) -------------------------------------------
// y = x * sigmoid(gate) element-wise over equal shapes (the gated attention's output gate); y
// may alias x. Compute dtype.
DFLASH_OP(sigmoid_mul, (const Tensor& x, const Tensor& gate, const Tensor& y), (x, gate, y))
// y [R, C] += sigmoid(s[r]) * x[r, :] for every row (the shared expert scaled by its gate);
// x and y the compute dtype, s f32 [R] (or [R, 1]).
DFLASH_OP(add_sigmoid_scaled, (const Tensor& y, const Tensor& x, const Tensor& s), (y, x, s))
// The backward of y = x * sigmoid(gate) (DSpark's gated Markov head, model/dspark_heads.cpp), so
// the step that trains it stays on the device: with s = sigmoid(gate),
//   dx += dy * s (accumulated: x's gradient has other paths), dgate = dy * x * s * (1 - s)
//   (overwritten), and dgate_sum f32 [C] += the column sums of dgate over every row, taken from
//   the f32 values before the compute-dtype rounding (the gate's bias gradient; may be empty).
// dy, x, gate, dx, dgate the compute dtype, equal shapes of rank >= 1 viewed as [R, C] (C the
// last dim). Deterministic (fixed summation order).
DFLASH_OP(sigmoid_mul_bwd,
          (const Tensor& dy, const Tensor& x, const Tensor& gate, const Tensor& dx,
           const Tensor& dgate, const Tensor& dgate_sum),
          (dy, x, gate, dx, dgate, dgate_sum))

// ---- LM head losses -----------------------------------------------------------------------------
// Final projection + cross-entropy over vocabulary chunks of `chunk` rows of w (never the
// whole [R, V] logits). h [R, D], w [V, D], labels i32 [R], weights f32 [R]. Rows with weight 0
// are ignored (their label may be -1). See LmHeadCeOut; out.workspace must hold
// lm_head_ce_workspace(R, D, V, chunk) f32 elements.
DFLASH_OP(lm_head_ce,
          (const Tensor& h, const Tensor& w, const Tensor& labels, const Tensor& weights,
           float grad_scale, int64_t chunk, const LmHeadCeOut& out),
          (h, w, labels, weights, grad_scale, chunk, out))
// Final projection + distribution losses over vocabulary chunks of `chunk` rows of w (never a
// whole [R, V] logits matrix): per row r, the teacher p = softmax(t_r · Wᵀ) (no gradient flows
// into it), the draft q = softmax(h_r · Wᵀ) and loss_r = the mix `div` of KL(p || q), KL(q || p),
// JSD and TV at temperature 1 (see LmHeadDivergences). h, t [R, D], w [V, D], weights f32 [R];
// rows with weight 0 are ignored. The gradient with respect to the draft logits is weight_r times
// the mix of the closed forms (docs/training.md "Distribution losses"; forward KL: q - p). See
// LmHeadKlOut; out.workspace must hold lm_head_kl_workspace(R, D, V, chunk) f32 elements.
DFLASH_OP(lm_head_kl,
          (const Tensor& h, const Tensor& t, const Tensor& w, const Tensor& weights,
           float grad_scale, int64_t chunk, const LmHeadDivergences& div, const LmHeadKlOut& out),
          (h, t, w, weights, grad_scale, chunk, div, out))

// ---- DSpark's confidence loss (backend/cpu/confidence_bce.cpp) --------------------------------
// The confidence head's binary cross-entropy against the detached target c* = clamp(1 - tv, 0, 1)
// (docs/training.md "DSpark drafters"), on the device so that the DSpark step can be recorded:
// per row r, with z the head's logit,
//   loss_rows[r] += alpha * (softplus(z) - c* z) where weights[r] > 0 (accumulated; the stable
//   softplus max(z, 0) + log1p(exp(-|z|))), nothing elsewhere;
//   dz[r] = grad_weights[r] * alpha * (sigmoid(z) - c*) (overwritten), and dbias f32 [1] += the
//   sum of those dz over every row before their compute-dtype rounding (the head's bias).
// z and dz the compute dtype of R elements ([R] or [R, 1]); tv, weights, grad_weights f32 [R].
// Without a gradient grad_weights, dz and dbias are all empty. Deterministic.
DFLASH_OP(confidence_bce,
          (const Tensor& z, const Tensor& tv, const Tensor& weights, const Tensor& grad_weights,
           float alpha, const Tensor& loss_rows, const Tensor& dz, const Tensor& dbias),
          (z, tv, weights, grad_weights, alpha, loss_rows, dz, dbias))

// ---- training statistics and the optimizer --------------------------------------------------
// Adds one micro-batch's loss and accuracy sums into stats f32 [2 + 2P] (see LossStatsLayout):
// rows r with weights[r] > 0 add weights[r] * loss_rows[r] to the loss sum, weights[r] to the
// weight sum, and count at position r % P (correct when argmax[r] == labels[r]).
DFLASH_OP(loss_stats,
          (const Tensor& loss_rows, const Tensor& argmax, const Tensor& labels,
           const Tensor& weights, int64_t period, const Tensor& stats),
          (loss_rows, argmax, labels, weights, period, stats))
// D-PACE loss weights (docs/training.md "D-PACE"): rows in blocks of `block` consecutive rows
// (drafted slots k = 0..block-1 of one block), R a multiple of block. A row is trained when
// weights[r] > 0. Per block: q_k = exp(-ce[k]) (ce: the row's cross-entropy, f32 [R]),
// q~_k = (1 - alpha) q_k + alpha at trained rows and 1 at the others, C_k = prod_{i<=k} q~_i,
// out[k] = weights[k] * sum_{j>=k, j trained} C_j (overwritten, f32 [R]). With weights the 0/1
// slot mask out is the loss weight; with the mask times a gradient scale, the gradient's weight.
// 0 < alpha <= 1. Computed in double, one block at a time, so rows of other blocks never matter.
DFLASH_OP(dpace_weights,
          (const Tensor& ce, const Tensor& weights, int64_t block, float alpha, const Tensor& out),
          (ce, weights, block, alpha, out))
// out f32 [1] = sum of x² over x f32 (overwritten). Deterministic.
DFLASH_OP(sum_squares, (const Tensor& x, const Tensor& out), (x, out))
// scale f32 [1] = max_norm / (sqrt(norm_sq) + 1e-6) when max_norm > 0 and the norm exceeds it,
// else 1 (torch.nn.utils.clip_grad_norm_'s rule), computed on the device.
DFLASH_OP(clip_scale, (const Tensor& norm_sq, float max_norm, const Tensor& scale),
          (norm_sq, max_norm, scale))
// Decoupled-weight-decay Adam on fp32 master/grad/moments (any equal element counts: a whole
// flat parameter buffer at once). The gradient is multiplied by grad_scale[0] (f32 [1], on
// the device; empty = 1) first. `value` (may be empty) receives the updated master in its own
// dtype (the bf16 compute copy).
DFLASH_OP(adamw_step,
          (const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
           const AdamWParams& p, const Tensor& grad_scale, const Tensor& value),
          (master, grad, m, v, p, grad_scale, value))
// Muon (docs/training.md "Muon"), its element-wise parts; the Newton-Schulz iteration between
// them is gemm. muon_momentum: g = grad * grad_scale[0] (f32 [1] on the device; empty = 1),
// momentum = mu * momentum + g, update = g + mu * momentum (Nesterov); grad, momentum, update
// f32 of equal element counts.
DFLASH_OP(muon_momentum,
          (const Tensor& grad, const Tensor& grad_scale, const Tensor& momentum, float mu,
           const Tensor& update),
          (grad, grad_scale, momentum, mu, update))
// out = x / (sqrt(norm_sq[0]) + eps): x f32, out f32 or bf16 of x's element count, norm_sq f32
// [1] on the device (sum_squares of x).
DFLASH_OP(muon_normalize, (const Tensor& x, const Tensor& norm_sq, float eps, const Tensor& out),
          (x, norm_sq, eps, out))
// master = master * scalars[1] - scalars[0] * lr_factor * x, scalars f32 [2] on the device
// (lr, 1 - lr * weight_decay: one recorded update serves every step); master f32, x f32 or bf16
// of master's element count; value (may be empty) receives the updated master in its dtype.
DFLASH_OP(muon_update,
          (const Tensor& master, const Tensor& x, const Tensor& scalars, float lr_factor,
           const Tensor& value),
          (master, x, scalars, lr_factor, value))

// ---- decoding -----------------------------------------------------------------------------------
// out i32 [R] = index of the largest element of each row of x [R, V] (lowest on ties).
DFLASH_OP(argmax_rows, (const Tensor& x, const Tensor& out), (x, out))
// out i32 [R]: for each row of logits f32 [R, V], the token that uniforms[r] (f32 in [0, 1),
// on the device) picks from the row's sampling distribution (backend/sampling.h).
DFLASH_OP(sample_rows,
          (const Tensor& logits, const SampleParams& p, const Tensor& uniforms, const Tensor& out),
          (logits, p, uniforms, out))

// ---- DFlash2: grouped dynamic convolution ---------------------------------------------------
// Grouped dynamic causal convolution over x [R, D], R rows made of consecutive blocks of
// block_size rows (R % block_size == 0; row r sits at in-block position r % block_size, so taps
// never cross a block). base [2, k, D] (k taps), delta [R, 2*k*G] (the kernel projection of the
// sublayer input, G groups of S = D / G contiguous channels), half 0 (before the sublayer) or 1
// (after it). The dynamic coefficient belongs to the OUTPUT row:
//   y[r, c] = sum_{t < k, t <= r % block_size} (base[half, t, c] + delta[r, (half*k + t)*G +
//             c / S]) * x[r - t, c].
// y [R, D] may not alias x.
DFLASH_OP(dyn_conv_fwd,
          (const Tensor& x, const Tensor& base, const Tensor& delta, int64_t half,
           int64_t block_size, const Tensor& y),
          (x, base, delta, half, block_size, y))
// dx [R, D] overwritten; dbase f32 [2, k, D] accumulated (+=) in its half; ddelta [R, 2*k*G]
// (compute dtype) overwritten in the half's k*G columns, the other half's left alone.
// Deterministic.
DFLASH_OP(dyn_conv_bwd,
          (const Tensor& dy, const Tensor& x, const Tensor& base, const Tensor& delta, int64_t half,
           int64_t block_size, const Tensor& dx, const Tensor& dbase, const Tensor& ddelta),
          (dy, x, base, delta, half, block_size, dx, dbase, ddelta))

// ---- DSpark: the rnn Markov head's slot recurrence (backend/cpu/markov_rnn.cpp) -------------
// Rows in blocks of block_size consecutive rows (slot k of a block at row b * block_size + k; R
// a multiple of block_size), r = out.dim(1). Per block, from s_{-1} = 0 (the state restarts at
// every block; docs/training.md "DSpark drafters"):
//   a_k = pre[row] + bias + j[:, 0:r] . s_{k-1}     (3r values: gate | candidate | output)
//   s_k = sigmoid(gate) * s_{k-1} + (1 - sigmoid(gate)) * tanh(candidate);  out[row] = tanh(output)
// pre [R, 3r] (the head's other inputs through the other columns of j) and out [R, r] in the
// compute dtype; bias [3r] and j [3r, C], C >= r, the compute dtype (the head's joint_proj: only
// the first r columns, the state's, are read); act f32 [R, 3r] receives every a_k for the
// backward. The state and the sums stay f32 (the dot over c = 0..r-1 in order).
DFLASH_OP(markov_rnn_fwd,
          (const Tensor& pre, const Tensor& bias, const Tensor& j, int64_t block_size,
           const Tensor& act, const Tensor& out),
          (pre, bias, j, block_size, act, out))
// The backward from dout [R, r] (the gradient of out) and the forward's act: dact [R, 3r] =
// d(loss)/d(a_k) (overwritten), which is pre's gradient too; dbias f32 [3r] += the sum of dact
// over the rows; s_prev [R, r] = s_{k-1} of every row (0 at slot 0; overwritten), recomputed from
// act, so that j's state-column gradient is dactᵀ . s_prev (a gemm). The state's gradient runs
// back over a block's slots: ds_{k-1} = ds_k * sigmoid(gate_k) + j[:, 0:r]ᵀ . dact_k (f32).
// dact and s_prev in the compute dtype. Deterministic (no floating-point atomics).
DFLASH_OP(markov_rnn_bwd,
          (const Tensor& dout, const Tensor& act, const Tensor& j, int64_t block_size,
           const Tensor& dact, const Tensor& dbias, const Tensor& s_prev),
          (dout, act, j, block_size, dact, dbias, s_prev))

// ---- DFlash2: the candidate selector's pair scores and top-K --------------------------------
// The candidate selector's pair scores (without the unary term): for slot p, predecessor i and
// candidate j, out[p, i, j] = sum_r A[pred[p, i], r] * z[p, r] * Bc[cand[p, j], r], summed in
// f32. z [P, r] (hidden_projection of the slot's hidden state), pred i32 [P, Kp], cand i32
// [P, K] (ids in [0, V)), A / Bc [V, r] (predecessor / successor codebooks), out f32
// [P, Kp, K].
DFLASH_OP(selector_scores_fwd,
          (const Tensor& z, const Tensor& pred, const Tensor& cand, const Tensor& a,
           const Tensor& bc, const Tensor& out),
          (z, pred, cand, a, bc, out))
// dscores f32 [P, Kp, K]; dz [P, r] (compute dtype) overwritten; da / dbc f32 [V, r]
// accumulated (+=) at the rows the ids name. Deterministic (no floating-point atomics).
DFLASH_OP(selector_scores_bwd,
          (const Tensor& dscores, const Tensor& z, const Tensor& pred, const Tensor& cand,
           const Tensor& a, const Tensor& bc, const Tensor& dz, const Tensor& da,
           const Tensor& dbc),
          (dscores, z, pred, cand, a, bc, dz, da, dbc))
// values f32 [R, K] and indices i32 [R, K]: the K largest entries of each row of x f32 [R, V],
// largest first, equal values in ascending index order (so indices[r, 0] == argmax_rows).
// 1 <= K <= V.
DFLASH_OP(topk_rows, (const Tensor& x, const Tensor& values, const Tensor& indices),
          (x, values, indices))

// ---- DFlash2: the selector loss (backend/cpu/selector_loss.cpp) -----------------------------
// Hard target injection after topk_rows(logits, values, ids): for a row r with labels[r] >= 0
// whose label is candidate k, label_pos[r] = k and hit[r] = 1; a label outside the strict
// top-K replaces the weakest candidate (k = K-1) with its own logit (values[r, K-1] =
// logits[r, labels[r]], ids[r, K-1] = labels[r]), label_pos[r] = K-1 and hit[r] = 0. Rows
// with labels[r] < 0: label_pos -1, hit 0, candidates unchanged. logits f32 [R, V], labels /
// label_pos / hit i32 [R], values f32 [R, K] and ids i32 [R, K] updated in place.
DFLASH_OP(selector_inject,
          (const Tensor& logits, const Tensor& labels, const Tensor& values, const Tensor& ids,
           const Tensor& label_pos, const Tensor& hit),
          (logits, labels, values, ids, label_pos, hit))
// The selector's K-way cross-entropy (see SelectorCeArgs): per row, scores S_k = u(values_k)
// + pair_k with u the unary post-processing (x multiplier, then the soft cap), loss
// -log softmax(S)[label_pos] and its gradients.
DFLASH_OP(selector_ce, (const SelectorCeArgs& a), (a))
// Adds one micro-batch's selector sums into stats f32 [SelectorStatsLayout{block}.size()]:
// rows in blocks of `block` rows (row 0 of each block is the anchor), per row the loss,
// the teacher-forced pick, label_pos and hit of selector_inject / selector_ce and its weight.
// The self-conditioned path of a block is alive at row k while every trained row 1..k hit and
// picked the target (teacher-forced predecessors = the path's own while it is alive); the
// oracle run lasts while the target is in the strict top-K.
DFLASH_OP(selector_stats,
          (const Tensor& loss_rows, const Tensor& pick, const Tensor& label_pos, const Tensor& hit,
           const Tensor& weights, int64_t block, const Tensor& stats),
          (loss_rows, pick, label_pos, hit, weights, block, stats))
// out f32 [R, D] = sum_k dvalues[r, k] * w[ids[r, k]] (overwritten): the gradient that the
// candidates' logits (h_r . w[id]) send to h. dvalues f32 [R, K], ids i32 [R, K], w [V, D]
// (the compute dtype). Deterministic.
DFLASH_OP(selector_unary_bwd,
          (const Tensor& dvalues, const Tensor& ids, const Tensor& w, const Tensor& out),
          (dvalues, ids, w, out))

// ---- mixture of experts (backend/ops.h: MoeRouting, MoeExperts) ----------------------------
// logits f32 [R, E] -> experts i32 [R, k], weights f32 [R, k]: each row's k picks in descending
// router score, ties to the lower expert id (deterministic). Both router kinds rank the logits
// themselves (softmax is monotone, so these are softmax_topk's k largest p too; ranking the
// exact logits lets every backend pick the same experts whatever its exp).
DFLASH_OP(moe_route,
          (const Tensor& logits, const MoeRouting& routing, const Tensor& experts,
           const Tensor& weights),
          (logits, routing, experts, weights))
// out [R, D] = sum_j weights[r, j] * expert_{experts[r, j]}(x[r]), the k terms summed in j order
// in fp32, out overwritten; expert_e(x) = down_e · act(gate_up_e · x + b_gu) + b_d. x [R, D],
// experts i32 [R, k] with ids in [0, E) (the CPU checks them; CUDA, which cannot read them,
// leaves a term with an id outside out), weights f32 [R, k]. A row's bits do not depend on the
// other rows (row invariance: a decode step and a verify block agree). The expert matrices may
// be MXFP4 (MoeExperts::mxfp4()): decoded as they are read, the same result bit for bit as the
// op on the decoded weights (f32 on the CPU, bf16 on CUDA), and no decoded copy is kept.
DFLASH_OP(moe_experts,
          (const Tensor& x, const Tensor& experts, const Tensor& weights, const MoeExperts& w,
           const Tensor& out),
          (x, experts, weights, w, out))

// ---- Gated DeltaNet (the linear-attention layers of qwen3_next / qwen3_5 targets) -----------
// Forward only: the target is frozen while a drafter trains, so no op here has a backward.
// C = 2*Hk*dk + Hv*dv (the q|k|v channels), r = Hv / Hk (an integer); "compute dtype" is f32 on
// the CPU and bf16 on CUDA. The recurrence's inputs, state and output stay f32 everywhere.
//
// Short causal depthwise convolution + SiLU over the q|k|v channels. x [S, C] raw (pre-conv)
// inputs, compute dtype; w [C, K] (HF's conv1d.weight [C, 1, K] viewed), compute dtype, K >= 2;
// state f32 [K-1, C]: the K-1 raw inputs before x[0], oldest first (zeros at a sequence start),
// read only. y [S, C] compute dtype: y[t, c] = silu(sum_j w[c, j] * u[t-K+1+j, c]), u = [state ;
// x].
DFLASH_OP(gdn_conv, (const Tensor& x, const Tensor& w, const Tensor& state, const Tensor& y),
          (x, w, state, y))
// state f32 [K-1, C] <- the last K-1 rows of [state ; x[0 : n)], n = count[0] (i32 [1] on the
// device, clamped to [0, S]); x [S, C] compute dtype. Rolls the conv cache forward by the n
// accepted tokens of a verify block.
DFLASH_OP(gdn_conv_advance, (const Tensor& state, const Tensor& x, const Tensor& count),
          (state, x, count))
// The recurrence's inputs from the conv output and the b / a projections. conv_out [S, C] as
// [q all heads | k all heads | v all heads] (compute dtype); b, a [S, Hv] (compute dtype); a_log,
// dt_bias [Hv] (f32 or the compute dtype). Outputs, all f32: q, k [S, Hk, dk], each head
// L2-normalised over dk as x * rsqrt(sum x^2 + 1e-6), q then times dk^-0.5; v [S, Hv, dv];
// g [S, Hv] = -exp(a_log) * softplus(a + dt_bias) (softplus(x) = x above 20); beta [S, Hv] =
// sigmoid(b). Hk, dk, Hv, dv are read from the output shapes.
DFLASH_OP(gdn_prepare,
          (const Tensor& conv_out, const Tensor& b, const Tensor& a, const Tensor& a_log,
           const Tensor& dt_bias, const Tensor& q, const Tensor& k, const Tensor& v,
           const Tensor& g, const Tensor& beta),
          (conv_out, b, a, a_log, dt_bias, q, k, v, g, beta))
// The gated delta rule over the S tokens of one sequence; value head h reads key head h / r.
// Per token, for each value head with state S_h:
//   S_h <- exp(g) * S_h;  e = v - S_h^T k;  S_h <- S_h + k (beta * e)^T;  o = S_h^T q
// q, k f32 [S, Hk, dk]; v f32 [S, Hv, dv]; g, beta f32 [S, Hv]; state f32 [Hv, dk, dv] (HF's
// orientation), updated in place; o f32 [S, Hv, dv].
// gdn_chunked: the chunked (WY) form, chunks of 64 tokens (any S; a short last chunk), for
// prefills and the training step's target forward. Equal to gdn_recurrent up to f32 rounding.
DFLASH_OP(gdn_chunked,
          (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
           const Tensor& state, const Tensor& o),
          (q, k, v, g, beta, state, o))
// gdn_recurrent: token by token (decode, verify blocks, and the replay after a rejected draft).
// count i32 [1] on the device, or empty: only the first min(max(count[0], 0), S) tokens are
// applied (o rows past them are not written); o may be empty (a replay needs only the state).
DFLASH_OP(gdn_recurrent,
          (const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g, const Tensor& beta,
           const Tensor& state, const Tensor& o, const Tensor& count),
          (q, k, v, g, beta, state, o, count))
// The layer's output norm (NOT zero-centred), per token and head over dv:
// y = cast(o * rsqrt(mean(o^2) + eps)) * w * silu(z), cast = to the compute dtype. o f32
// [S, Hv, dv]; z [S, Hv*dv] compute dtype; w [dv] compute dtype (one vector shared by every head);
// y [S, Hv*dv] compute dtype.
DFLASH_OP(gdn_gated_norm,
          (const Tensor& o, const Tensor& z, const Tensor& w, float eps, const Tensor& y),
          (o, z, w, eps, y))

#undef DFLASH_OP
#undef DFLASH_OP_DEFAULT

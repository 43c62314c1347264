// The ops' shape contracts, one section per op family in backend/op_list.h's order. Tested by
// the wrong-argument cases of tests/ops/<family>_test.cpp and tests/cuda/<family>_cuda_test.cpp.
#include "backend/op_shapes.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <utility>

#include "backend/backend.h"
#include "core/error.h"

namespace dflash {

// ---- copies on the device -----------------------------------------------------------------------

void check_copy_shapes(const Tensor& dst, const Tensor& src) {
    DF_CHECK(dst.numel() == src.numel(),
             "copy: dst is {} but src is {}; they need the same element count", dst.describe(),
             src.describe());
}

void check_copy_columns_shapes(const Tensor& dst, int64_t col, const Tensor& src) {
    DF_CHECK(dst.rank() == 2 && src.rank() == 2 && dst.dtype() == src.dtype() &&
                 dst.dim(0) == src.dim(0) && col >= 0 && col + src.dim(1) <= dst.dim(1),
             "copy_columns: cannot place src {} at column {} of dst {}", src.describe(), col,
             dst.describe());
}

size_t check_write_rows_args(const Tensor& dst, const Tensor& row0, const Tensor& src) {
    bool rows_match = dst.rank() == src.rank() && dst.rank() >= 1;
    for (int64_t d = 1; rows_match && d < dst.rank(); ++d) rows_match = dst.dim(d) == src.dim(d);
    DF_CHECK(rows_match && dst.dtype() == src.dtype(),
             "write_rows: src {} does not fit the rows of dst {} (same dtype and row shape)",
             src.describe(), dst.describe());
    DF_CHECK(row0.dtype() == DType::i32 && row0.numel() == 1, "write_rows: row0 {} must be i32 [1]",
             row0.describe());
    return dst.dim(0) > 0 ? dst.nbytes() / static_cast<size_t>(dst.dim(0)) : 0;
}

// ---- GEMM ---------------------------------------------------------------------------------------

namespace {

struct Mat {
    int64_t rows = 0, cols = 0;
};

Mat as_matrix(const Tensor& t, const char* name) {
    DF_CHECK(t.rank() >= 2, "gemm: {} has shape {}; expected a matrix (rank >= 2)", name,
             t.shape().to_string());
    int64_t rows = 1;
    for (int i = 0; i + 1 < t.rank(); ++i) rows *= t.dim(i);
    return {rows, t.dim(-1)};
}

}  // namespace

GemmDims check_gemm_shapes(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                           const Tensor& c) {
    const Mat ma = as_matrix(a, "A"), mb = as_matrix(b, "B"), mc = as_matrix(c, "C");
    const int64_t m = trans_a ? ma.cols : ma.rows;
    const int64_t k = trans_a ? ma.rows : ma.cols;
    const int64_t kb = trans_b ? mb.cols : mb.rows;
    const int64_t n = trans_b ? mb.rows : mb.cols;
    DF_CHECK(k == kb,
             "gemm: inner dimensions differ: op(A) is [{}, {}] (A {}{}) but op(B) is [{}, {}] "
             "(B {}{}); a linear layer with weight W [out, in] is gemm(x, false, W, true, y)",
             m, k, a.shape().to_string(), trans_a ? "ᵀ" : "", kb, n, b.shape().to_string(),
             trans_b ? "ᵀ" : "");
    DF_CHECK(mc.rows == m && mc.cols == n,
             "gemm: C has shape {} (as [{}, {}]) but op(A)·op(B) is [{}, {}] (A {}{}, B {}{})",
             c.shape().to_string(), mc.rows, mc.cols, m, n, a.shape().to_string(),
             trans_a ? "ᵀ" : "", b.shape().to_string(), trans_b ? "ᵀ" : "");
    return {m, n, k};
}

// ---- embedding ----------------------------------------------------------------------------------

void check_embedding_shapes(const Tensor& table, const Tensor& ids, const Tensor& rows,
                            const char* op, const char* table_name, const char* rows_name) {
    DF_CHECK(table.rank() == 2, "{}: {} has shape {}; expected [V, D]", op, table_name,
             table.shape().to_string());
    const int64_t d = table.dim(1);
    DF_CHECK(rows.rank() >= 1 && rows.dim(-1) == d && rows.numel() == ids.numel() * d,
             "{}: {} has shape {} but ids has {} entries and {} is {}; expected [{}, {}]", op,
             rows_name, rows.shape().to_string(), ids.numel(), table_name,
             table.shape().to_string(), ids.numel(), d);
}

// ---- RMSNorm ------------------------------------------------------------------------------------

namespace {

// x viewed as [R, C], C = w.numel(); returns R.
int64_t check_norm_rows(const Tensor& x, const Tensor& w, const char* op) {
    const int64_t c = w.numel();
    DF_CHECK(c > 0 && x.rank() >= 1 && x.dim(-1) == c,
             "{}: x has shape {} but w has {} elements; the norm runs over x's last dim, which "
             "must equal w.numel() (per-head norm: x [S, H, Dh] with w [Dh])",
             op, x.shape().to_string(), c);
    return x.numel() / c;
}

void check_shaped_like(const Tensor& t, const Tensor& ref, const char* op, const char* name,
                       const char* ref_name) {
    DF_CHECK(t.shape() == ref.shape(), "{}: {} has shape {} but {} has {}; they must match", op,
             name, t.shape().to_string(), ref_name, ref.shape().to_string());
}

void check_rstd(const Tensor& rstd, int64_t rows, const char* op) {
    DF_CHECK(rstd.empty() || rstd.numel() == rows,
             "{}: rstd has shape {} but x has {} rows of the norm dim", op,
             rstd.shape().to_string(), rows);
}

}  // namespace

int64_t check_rmsnorm_fwd_shapes(const Tensor& x, const Tensor& w, const Tensor& y,
                                 const Tensor& rstd) {
    const int64_t rows = check_norm_rows(x, w, "rmsnorm_fwd");
    check_shaped_like(y, x, "rmsnorm_fwd", "y", "x");
    check_rstd(rstd, rows, "rmsnorm_fwd");
    return rows;
}

int64_t check_rmsnorm_bwd_shapes(const Tensor& dy, const Tensor& x, const Tensor& w,
                                 const Tensor& rstd, const Tensor& dx, const Tensor& dw) {
    const int64_t rows = check_norm_rows(x, w, "rmsnorm_bwd");
    check_shaped_like(dy, x, "rmsnorm_bwd", "dy", "x");
    check_shaped_like(dx, x, "rmsnorm_bwd", "dx", "x");
    DF_CHECK(dw.numel() == w.numel(), "rmsnorm_bwd: dw has shape {} but w has {}",
             dw.shape().to_string(), w.shape().to_string());
    DF_CHECK(!rstd.empty() || rows == 0,
             "rmsnorm_bwd: rstd is empty; pass the rstd [{}] that rmsnorm_fwd wrote", rows);
    check_rstd(rstd, rows, "rmsnorm_bwd");
    return rows;
}

// ---- RoPE ---------------------------------------------------------------------------------------

void check_rope_shapes(const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
                       const char* op) {
    DF_CHECK(x.rank() == 3, "{}: x has shape {}; expected [S, H, Dh]", op, x.shape().to_string());
    const int64_t s_len = x.dim(0), dh = x.dim(2);
    DF_CHECK(dh % 2 == 0 && inv_freq.numel() >= 1 && inv_freq.numel() <= dh / 2,
             "{}: head_dim Dh={} needs an even Dh and inv_freq of Dh/2 entries (R/2 for a "
             "partial rotary over the first R dims), got {} (compute it with rope_inv_freq(cfg, "
             "R))",
             op, dh, inv_freq.describe());
    DF_CHECK(positions.dtype() == DType::i32 && positions.numel() == s_len,
             "{}: positions is {} but x has S={} rows; expected i32 [{}]", op, positions.describe(),
             s_len, s_len);
}

// ---- attention ----------------------------------------------------------------------------------

namespace {

void check_heads_tensor(const Tensor& t, const char* op, const char* name) {
    DF_CHECK(t.rank() == 3, "{}: {} is {}, expected rank 3 ([S, heads, Dh])", op, name,
             t.describe());
}

void check_attention_like(const Tensor& t, const Tensor& like, const char* op, const char* name,
                          const char* like_name) {
    DF_CHECK(t.shape() == like.shape(), "{}: {} is {}, expected the shape of {} {}", op, name,
             t.describe(), like_name, like.shape().to_string());
}

void check_attention_mask(const AttnMask& m, const AttentionDims& d, const char* op) {
    if (!m.kv_len.empty()) {
        DF_CHECK(m.kind != AttnMaskKind::dflash_block && m.kv_len.dtype() == DType::i32 &&
                     m.kv_len.numel() == 1,
                 "{}: mask.kv_len is {}, expected i32 [1] with a causal or full mask", op,
                 m.kv_len.describe());
    }
    DF_CHECK(m.window >= 0, "{}: mask.window={}, expected >= 0 (0: no window)", op, m.window);
    DF_CHECK(m.window == 0 || m.kind != AttnMaskKind::full,
             "{}: mask.window={} is given with a full mask; a sliding window applies to causal "
             "and dflash_block masks only",
             op, m.window);
    DF_CHECK(!m.causal_block || m.kind == AttnMaskKind::dflash_block,
             "{}: mask.causal_block is set on a {} mask; it applies to dflash_block masks only", op,
             m.kind == AttnMaskKind::full ? "full" : "causal");
    DF_CHECK(m.sinks.empty() ||
                 (m.sinks.dtype() == DType::f32 && m.sinks.numel() == d.h && m.sinks.rank() == 1),
             "{}: mask.sinks is {}, expected f32 [{}] (one logit per query head) or empty", op,
             m.sinks.describe(), d.h);
    switch (m.kind) {
        case AttnMaskKind::causal:
            if (!m.kv_len.empty()) break;  // the query offset follows the cache length
            DF_CHECK(m.q_offset >= 0 && m.q_offset + d.sq <= d.sk,
                     "{}: causal mask with q_offset={} and Sq={} needs q_offset + Sq <= Sk={} "
                     "(the keys must include every query's own position)",
                     op, m.q_offset, d.sq, d.sk);
            break;
        case AttnMaskKind::full:
            break;
        case AttnMaskKind::dflash_block: {
            DF_CHECK(m.block_size > 0, "{}: dflash_block mask has block_size={}, expected > 0", op,
                     m.block_size);
            DF_CHECK(d.sq % m.block_size == 0,
                     "{}: dflash_block has Sq={} queries, expected a multiple of block_size={} "
                     "(Sq = N * block_size)",
                     op, d.sq, m.block_size);
            DF_CHECK(m.ctx_len >= 0 && d.sk == m.ctx_len + d.sq,
                     "{}: dflash_block has Sk={} keys but ctx_len={} and Sq={}; expected "
                     "Sk = ctx_len + Sq (keys are [context rows ; block rows])",
                     op, d.sk, m.ctx_len, d.sq);
            const int64_t n = d.sq / m.block_size;
            DF_CHECK(m.anchors.dtype() == DType::i32 && m.anchors.numel() >= n &&
                         (n == 0 || !m.anchors.empty()),
                     "{}: dflash_block mask with {} blocks has anchors {}, expected i32 [{}]", op,
                     n, m.anchors.describe(), n);
            DF_CHECK(m.ctx_start.empty() ||
                         (m.ctx_start.dtype() == DType::i32 && m.ctx_start.numel() >= n),
                     "{}: dflash_block mask with {} blocks has ctx_start {}, expected i32 [{}]", op,
                     n, m.ctx_start.describe(), n);
            break;
        }
    }
}

AttentionDims check_attention_common(const Tensor& q, const Tensor& k, const Tensor& v,
                                     const AttnMask& mask, const Tensor& lse, bool lse_needed,
                                     const char* op) {
    check_heads_tensor(q, op, "q");
    check_heads_tensor(k, op, "k");
    check_heads_tensor(v, op, "v");
    check_attention_like(v, k, op, "v", "k");
    const AttentionDims d{q.dim(0), k.dim(0), q.dim(1), k.dim(1), q.dim(2)};
    DF_CHECK(k.dim(2) == d.dh, "{}: k head dim {} != q head dim {} (q {}, k {})", op, k.dim(2),
             d.dh, q.describe(), k.describe());
    DF_CHECK(d.dh > 0, "{}: head dim is 0 (q {})", op, q.describe());
    DF_CHECK(d.hkv > 0 && d.h % d.hkv == 0,
             "{}: q has H={} heads and k has Hkv={}; expected H to be a positive multiple of Hkv "
             "(GQA)",
             op, d.h, d.hkv);
    DF_CHECK(!lse_needed || !lse.empty() || d.h * d.sq == 0,
             "{}: lse is empty; the backward needs the lse [H, Sq] of the forward", op);
    DF_CHECK(lse.empty() || (lse.dtype() == DType::f32 && lse.shape() == Shape({d.h, d.sq})),
             "{}: lse is {}, expected f32[{}, {}] ([H, Sq])", op, lse.describe(), d.h, d.sq);
    check_attention_mask(mask, d, op);
    return d;
}

}  // namespace

AttentionDims check_attention_fwd_shapes(const Tensor& q, const Tensor& k, const Tensor& v,
                                         const AttnMask& mask, const Tensor& out,
                                         const Tensor& lse) {
    constexpr const char* op = "attention_fwd";
    const AttentionDims d = check_attention_common(q, k, v, mask, lse, false, op);
    check_attention_like(out, q, op, "out", "q");
    return d;
}

AttentionDims check_attention_bwd_shapes(const Tensor& dout, const Tensor& q, const Tensor& k,
                                         const Tensor& v, const Tensor& out, const Tensor& lse,
                                         const AttnMask& mask, const Tensor& dq, const Tensor& dk,
                                         const Tensor& dv) {
    constexpr const char* op = "attention_bwd";
    // The trainer never backpropagates through a target, the only user of sinks.
    DF_CHECK(mask.sinks.empty(), "attention_bwd: sinks are forward-only (targets are frozen)");
    const AttentionDims d = check_attention_common(q, k, v, mask, lse, true, op);
    check_attention_like(dout, q, op, "dout", "q");
    check_attention_like(out, q, op, "out", "q");
    check_attention_like(dq, q, op, "dq", "q");
    check_attention_like(dk, k, op, "dk", "k");
    check_attention_like(dv, k, op, "dv", "k");
    return d;
}

// ---- gating -------------------------------------------------------------------------------------

void check_sigmoid_mul_shapes(const Tensor& x, const Tensor& gate, const Tensor& y) {
    check_shaped_like(gate, x, "sigmoid_mul", "gate", "x");
    check_shaped_like(y, x, "sigmoid_mul", "y", "x");
}

int64_t check_add_sigmoid_scaled_shapes(const Tensor& y, const Tensor& x, const Tensor& s) {
    check_shaped_like(x, y, "add_sigmoid_scaled", "x", "y");
    DF_CHECK(y.rank() >= 1, "add_sigmoid_scaled: y has shape {}; expected [R, C]",
             y.shape().to_string());
    const int64_t rows = y.dim(0);
    DF_CHECK(s.numel() == rows,
             "add_sigmoid_scaled: s has shape {} but y has {} rows; expected one gate logit a "
             "row",
             s.shape().to_string(), rows);
    return rows;
}

int64_t check_sigmoid_mul_bwd_shapes(const Tensor& dy, const Tensor& x, const Tensor& gate,
                                     const Tensor& dx, const Tensor& dgate,
                                     const Tensor& dgate_sum) {
    check_shaped_like(dy, x, "sigmoid_mul_bwd", "dy", "x");
    check_shaped_like(gate, x, "sigmoid_mul_bwd", "gate", "x");
    check_shaped_like(dx, x, "sigmoid_mul_bwd", "dx", "x");
    check_shaped_like(dgate, x, "sigmoid_mul_bwd", "dgate", "x");
    DF_CHECK(x.rank() >= 1, "sigmoid_mul_bwd: x has shape {}; expected [R, C]",
             x.shape().to_string());
    const int64_t cols = x.dim(x.rank() - 1);
    DF_CHECK(dgate_sum.empty() || (dgate_sum.numel() == cols && dgate_sum.dtype() == DType::f32),
             "sigmoid_mul_bwd: dgate_sum is {} but x has {} columns; expected f32 [{}] or empty",
             dgate_sum.describe(), cols, cols);
    return cols;
}

// ---- SwiGLU -------------------------------------------------------------------------------------

void check_swiglu_fwd_shapes(const Tensor& gate, const Tensor& up, const Tensor& out) {
    check_shaped_like(up, gate, "swiglu_fwd", "up", "gate");
    check_shaped_like(out, gate, "swiglu_fwd", "out", "gate");
}

void check_swiglu_bwd_shapes(const Tensor& dout, const Tensor& gate, const Tensor& up,
                             const Tensor& dgate, const Tensor& dup) {
    check_shaped_like(dout, gate, "swiglu_bwd", "dout", "gate");
    check_shaped_like(up, gate, "swiglu_bwd", "up", "gate");
    check_shaped_like(dgate, gate, "swiglu_bwd", "dgate", "gate");
    check_shaped_like(dup, gate, "swiglu_bwd", "dup", "gate");
}

// ---- element-wise -------------------------------------------------------------------------------

void check_add_inplace_shapes(const Tensor& y, const Tensor& x) {
    DF_CHECK(y.numel() == x.numel(),
             "add_inplace: y has shape {} ({} elements) but x has {} ({} elements); they need the "
             "same element count",
             y.shape().to_string(), y.numel(), x.shape().to_string(), x.numel());
}

void check_add_row_bias_shapes(const Tensor& y, const Tensor& bias) {
    const int64_t c = bias.numel();
    DF_CHECK(c > 0 && y.numel() % c == 0 && y.dim(-1) == c,
             "add_row_bias: y is {} but bias is {}; expected y [R, C] and bias [C]", y.describe(),
             bias.describe());
}

// ---- LM head losses -----------------------------------------------------------------------------

namespace {

// What lm_head_ce and lm_head_kl share: h [R, D], w [V, D], weights f32 [R], chunk, and the
// outputs asked for.
void check_lm_head_common(const char* op, const Tensor& h, const Tensor& w, const Tensor& weights,
                          int64_t chunk, const Tensor& loss_rows, const Tensor& argmax,
                          const Tensor& dh, const Tensor& dw) {
    DF_CHECK(h.rank() == 2, "{}: h is {}, expected [R, D]", op, h.describe());
    const int64_t r = h.dim(0), d = h.dim(1);
    DF_CHECK(w.rank() == 2 && w.dim(1) == d && w.dim(0) >= 1,
             "{}: w is {}, expected [V, D={}] with V >= 1 (h is {})", op, w.describe(), d,
             h.describe());
    DF_CHECK(weights.dtype() == DType::f32 && weights.shape() == Shape({r}),
             "{}: weights is {}, expected f32 [R={}]", op, weights.describe(), r);
    DF_CHECK(chunk >= 1, "{}: chunk={}, expected >= 1 rows of w per step", op, chunk);
    DF_CHECK(
        loss_rows.empty() || (loss_rows.dtype() == DType::f32 && loss_rows.shape() == Shape({r})),
        "{}: loss_rows is {}, expected f32 [R={}]", op, loss_rows.describe(), r);
    DF_CHECK(argmax.empty() || (argmax.dtype() == DType::i32 && argmax.shape() == Shape({r})),
             "{}: argmax is {}, expected i32 [R={}]", op, argmax.describe(), r);
    DF_CHECK(dh.empty() || dh.shape() == h.shape(), "{}: dh is {}, expected {} like h", op,
             dh.describe(), h.shape().to_string());
    DF_CHECK(dw.empty() || (dw.dtype() == DType::f32 && dw.shape() == w.shape()),
             "{}: dw is {}, expected f32 {} like w", op, dw.describe(), w.shape().to_string());
}

}  // namespace

void check_lm_head_ce_shapes(const Tensor& h, const Tensor& w, const Tensor& labels,
                             const Tensor& weights, int64_t chunk, const LmHeadCeOut& out) {
    check_lm_head_common("lm_head_ce", h, w, weights, chunk, out.loss_rows, out.argmax, out.dh,
                         out.dw);
    DF_CHECK(labels.dtype() == DType::i32 && labels.shape() == Shape({h.dim(0)}),
             "lm_head_ce: labels is {}, expected i32 [R={}]", labels.describe(), h.dim(0));
}

void check_lm_head_kl_shapes(const Tensor& h, const Tensor& t, const Tensor& w,
                             const Tensor& weights, int64_t chunk, const LmHeadDivergences& div,
                             const LmHeadKlOut& out) {
    bool any = false, valid = true;
    for (const float x : {div.kl, div.rkl, div.jsd, div.tv}) {
        valid = valid && std::isfinite(x) && x >= 0.0f;
        any = any || x > 0.0f;
    }
    DF_CHECK(valid && any,
             "lm_head_kl: divergence weights kl={} rkl={} jsd={} tv={}; expected finite weights "
             ">= 0, at least one > 0",
             div.kl, div.rkl, div.jsd, div.tv);
    check_lm_head_common("lm_head_kl", h, w, weights, chunk, out.loss_rows, out.argmax, out.dh,
                         out.dw);
    DF_CHECK(t.dtype() == h.dtype() && t.shape() == h.shape(),
             "lm_head_kl: the teacher's hidden states t are {}, expected {} like h", t.describe(),
             h.describe());
}

// ---- DSpark's confidence loss ------------------------------------------------------------------

int64_t check_confidence_bce_args(const Tensor& z, const Tensor& tv, const Tensor& weights,
                                  const Tensor& grad_weights, const Tensor& loss_rows,
                                  const Tensor& dz, const Tensor& dbias) {
    const int64_t r = z.numel();
    for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&tv, "tv"},
                                  {&weights, "weights"},
                                  {&loss_rows, "loss_rows"}})
        DF_CHECK(t->dtype() == DType::f32 && t->numel() == r,
                 "confidence_bce: {} is {} but z has {} rows; expected f32 [{}]", name,
                 t->describe(), r, r);
    const bool grads = !grad_weights.empty();
    DF_CHECK(!grads || (grad_weights.dtype() == DType::f32 && grad_weights.numel() == r),
             "confidence_bce: grad_weights is {}; expected f32 [{}] or empty",
             grad_weights.describe(), r);
    DF_CHECK(
        grads ? dz.numel() == r : dz.empty(),
        "confidence_bce: dz is {} with grad_weights {}; expected {} elements exactly when there "
        "is a gradient",
        dz.describe(), grad_weights.describe(), r);
    DF_CHECK(dbias.empty() || (grads && dbias.dtype() == DType::f32 && dbias.numel() == 1),
             "confidence_bce: dbias is {}; expected f32 [1] with a gradient, or empty",
             dbias.describe());
    return r;
}

// ---- training statistics and the optimizer ------------------------------------------------------

int64_t check_loss_stats_shapes(const Tensor& loss_rows, const Tensor& argmax, const Tensor& labels,
                                const Tensor& weights, int64_t period, const Tensor& stats) {
    const int64_t r = loss_rows.numel();
    const LossStatsLayout lay{period};
    DF_CHECK(period >= 1 && stats.dtype() == DType::f32 && stats.numel() == lay.size(),
             "loss_stats: stats is {}, expected f32 [{}] for period {}", stats.describe(),
             lay.size(), period);
    DF_CHECK(loss_rows.dtype() == DType::f32 && weights.dtype() == DType::f32 &&
                 argmax.dtype() == DType::i32 && labels.dtype() == DType::i32 &&
                 argmax.numel() == r && labels.numel() == r && weights.numel() == r,
             "loss_stats: loss_rows {}, argmax {}, labels {}, weights {}; expected f32, i32, i32, "
             "f32 of {} rows",
             loss_rows.describe(), argmax.describe(), labels.describe(), weights.describe(), r);
    return r;
}

int64_t check_dpace_weights_args(const Tensor& ce, const Tensor& weights, int64_t block,
                                 float alpha, const Tensor& out) {
    const int64_t r = ce.numel();
    DF_CHECK(ce.dtype() == DType::f32 && weights.dtype() == DType::f32 &&
                 out.dtype() == DType::f32 && weights.numel() == r && out.numel() == r,
             "dpace_weights: ce {}, weights {}, out {}; expected f32 of {} rows each",
             ce.describe(), weights.describe(), out.describe(), r);
    DF_CHECK(block >= 1 && r % block == 0, "dpace_weights: {} rows are not whole blocks of {} rows",
             r, block);
    DF_CHECK(alpha > 0.0f && alpha <= 1.0f, "dpace_weights: alpha={} is outside (0, 1]", alpha);
    return r;
}

void check_one_element(const Tensor& t, const char* op, const char* name) {
    DF_CHECK(t.numel() == 1 && !t.empty(), "{}: {} is {}, expected f32 [1]", op, name,
             t.describe());
}

void check_adamw_args(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                      const AdamWParams& p, const Tensor& grad_scale, const Tensor& value) {
    DF_CHECK(grad.numel() == master.numel() && m.numel() == master.numel() &&
                 v.numel() == master.numel(),
             "adamw_step: master {} grad {} m {} v {} must have the same element count",
             master.shape().to_string(), grad.shape().to_string(), m.shape().to_string(),
             v.shape().to_string());
    DF_CHECK(p.step >= 1, "adamw_step: step={} but steps are 1-based (bias correction)", p.step);
    DF_CHECK(p.beta1 >= 0 && p.beta1 < 1 && p.beta2 >= 0 && p.beta2 < 1,
             "adamw_step: betas ({}, {}) must lie in [0, 1)", p.beta1, p.beta2);
    if (!grad_scale.empty()) check_one_element(grad_scale, "adamw_step", "grad_scale");
    DF_CHECK(value.empty() || value.numel() == master.numel(),
             "adamw_step: value is {} but master is {}; they need the same element count",
             value.describe(), master.describe());
    DF_CHECK(p.scalars.empty() || p.scalars.numel() == 3,
             "adamw_step: scalars is {}, expected f32 [3]", p.scalars.describe());
}

int64_t check_muon_momentum_args(const Tensor& grad, const Tensor& grad_scale,
                                 const Tensor& momentum, const Tensor& update) {
    DF_CHECK(momentum.numel() == grad.numel() && update.numel() == grad.numel(),
             "muon_momentum: grad {} momentum {} update {} must have the same element count",
             grad.describe(), momentum.describe(), update.describe());
    if (!grad_scale.empty()) check_one_element(grad_scale, "muon_momentum", "grad_scale");
    return grad.numel();
}

int64_t check_muon_normalize_args(const Tensor& x, const Tensor& norm_sq, const Tensor& out) {
    DF_CHECK(out.numel() == x.numel(),
             "muon_normalize: x {} and out {} must have the same element count", x.describe(),
             out.describe());
    check_one_element(norm_sq, "muon_normalize", "norm_sq");
    return x.numel();
}

int64_t check_muon_update_args(const Tensor& master, const Tensor& x, const Tensor& scalars,
                               const Tensor& value) {
    DF_CHECK(x.numel() == master.numel() && (value.empty() || value.numel() == master.numel()),
             "muon_update: master {} x {} value {} must have the same element count",
             master.describe(), x.describe(), value.describe());
    DF_CHECK(scalars.numel() == 2, "muon_update: scalars is {}, expected f32 [2] (lr, decay)",
             scalars.describe());
    return master.numel();
}

uint64_t check_uniform_noise_args(const Tensor& x, const Tensor& seed) {
    DF_CHECK(seed.dtype() == DType::i32 && seed.numel() == 2,
             "add_uniform_noise: seed is {}, expected i32 [2] (the seed's low and high words)",
             seed.describe());
    (void)x;
    if (seed.device().kind != DeviceKind::cpu) return 0;
    const auto lo = static_cast<uint32_t>(seed.i32()[0]), hi = static_cast<uint32_t>(seed.i32()[1]);
    return (static_cast<uint64_t>(hi) << 32) | lo;
}

// ---- decoding -----------------------------------------------------------------------------------

void check_argmax_rows_shapes(const Tensor& x, const Tensor& out) {
    DF_CHECK(x.rank() == 2 && out.dtype() == DType::i32 && out.numel() == x.dim(0),
             "argmax_rows: x {} and out {}; expected x [R, V] and out i32 [R]", x.describe(),
             out.describe());
}

void check_sample_rows_args(const Tensor& logits, const SampleParams& p, const Tensor& uniforms,
                            const Tensor& out) {
    DF_CHECK(logits.dtype() == DType::f32 && logits.rank() == 2 && uniforms.dtype() == DType::f32 &&
                 uniforms.numel() == logits.dim(0) && out.dtype() == DType::i32 &&
                 out.numel() == logits.dim(0),
             "sample_rows: logits {}, uniforms {}, out {}; expected f32 [R, V], f32 [R], i32 [R]",
             logits.describe(), uniforms.describe(), out.describe());
    DF_CHECK(p.temperature > 0 && p.top_k >= 0 && p.top_p > 0 && p.top_p <= 1,
             "sample_rows: temperature {} (> 0), top_k {} (>= 0), top_p {} (in (0, 1])",
             p.temperature, p.top_k, p.top_p);
}

// ---- DFlash2: grouped dynamic convolution -------------------------------------------------------

namespace {

DynConvDims check_dyn_conv_common(const Tensor& x, const Tensor& base, const Tensor& delta,
                                  int64_t half, int64_t block_size, const Tensor& y,
                                  const char* op) {
    DF_CHECK(x.rank() == 2, "{}: x is {}; expected [R, D]", op, x.describe());
    DynConvDims d;
    d.R = x.dim(0);
    d.D = x.dim(1);
    DF_CHECK(base.rank() == 3 && base.dim(0) == 2 && base.dim(2) == d.D && base.dim(1) >= 1,
             "{}: base is {}; expected [2, k, D={}]", op, base.describe(), d.D);
    d.k = base.dim(1);
    DF_CHECK(delta.rank() == 2 && delta.dim(0) == d.R && delta.dim(1) % (2 * d.k) == 0 &&
                 delta.dim(1) > 0,
             "{}: delta is {}; expected [R={}, 2*k*G] with k={}", op, delta.describe(), d.R, d.k);
    d.G = delta.dim(1) / (2 * d.k);
    DF_CHECK(d.D % d.G == 0, "{}: {} groups (delta {}) do not divide D={} channels", op, d.G,
             delta.describe(), d.D);
    d.S = d.D / d.G;
    DF_CHECK(half == 0 || half == 1, "{}: half={}; expected 0 (before) or 1 (after the sublayer)",
             op, half);
    DF_CHECK(block_size >= 1 && d.R % block_size == 0,
             "{}: block_size={} does not divide R={} rows (rows are whole blocks)", op, block_size,
             d.R);
    DF_CHECK(y.empty() || y.shape() == x.shape(), "{}: output is {}; expected {} like x", op,
             y.describe(), x.shape().to_string());
    return d;
}

}  // namespace

DynConvDims check_dyn_conv_fwd_shapes(const Tensor& x, const Tensor& base, const Tensor& delta,
                                      int64_t half, int64_t block_size, const Tensor& y) {
    const DynConvDims d =
        check_dyn_conv_common(x, base, delta, half, block_size, y, "dyn_conv_fwd");
    DF_CHECK(y.empty() || y.data() != x.data(), "dyn_conv_fwd: y may not alias x");
    return d;
}

DynConvDims check_dyn_conv_bwd_shapes(const Tensor& dy, const Tensor& x, const Tensor& base,
                                      const Tensor& delta, int64_t half, int64_t block_size,
                                      const Tensor& dx, const Tensor& dbase, const Tensor& ddelta) {
    const DynConvDims d =
        check_dyn_conv_common(x, base, delta, half, block_size, dx, "dyn_conv_bwd");
    DF_CHECK(
        dy.shape() == x.shape() && dbase.shape() == base.shape() && ddelta.shape() == delta.shape(),
        "dyn_conv_bwd: dy {}, dbase {}, ddelta {}; expected the shapes of x {}, base {}, "
        "delta {}",
        dy.describe(), dbase.describe(), ddelta.describe(), x.describe(), base.describe(),
        delta.describe());
    return d;
}

// ---- DSpark: the rnn Markov head's slot recurrence -------------------------------------------

namespace {

MarkovRnnDims check_markov_rnn_common(const Tensor& act, const Tensor& j, const Tensor& rows_r,
                                      int64_t block_size, const char* op, const char* rows_name) {
    DF_CHECK(rows_r.rank() == 2 && rows_r.dim(1) >= 1, "{}: {} {}; expected [R, r] with r >= 1", op,
             rows_name, rows_r.describe());
    MarkovRnnDims d;
    d.R = rows_r.dim(0);
    d.r = rows_r.dim(1);
    DF_CHECK(
        act.rank() == 2 && act.dim(0) == d.R && act.dim(1) == 3 * d.r && act.dtype() == DType::f32,
        "{}: act {}; expected f32 [{}, {}]", op, act.describe(), d.R, 3 * d.r);
    DF_CHECK(j.rank() == 2 && j.dim(0) == 3 * d.r && j.dim(1) >= d.r,
             "{}: j {}; expected [{}, C] with C >= {} (the state's columns first)", op,
             j.describe(), 3 * d.r, d.r);
    d.C = j.dim(1);
    DF_CHECK(block_size >= 1 && d.R % block_size == 0,
             "{}: {} rows are not whole blocks of block_size={}", op, d.R, block_size);
    return d;
}

}  // namespace

MarkovRnnDims check_markov_rnn_fwd_shapes(const Tensor& pre, const Tensor& bias, const Tensor& j,
                                          int64_t block_size, const Tensor& act,
                                          const Tensor& out) {
    const MarkovRnnDims d =
        check_markov_rnn_common(act, j, out, block_size, "markov_rnn_fwd", "out");
    DF_CHECK(pre.shape() == act.shape() && bias.rank() == 1 && bias.dim(0) == 3 * d.r,
             "markov_rnn_fwd: pre {}, bias {}; expected [{}, {}] and [{}]", pre.describe(),
             bias.describe(), d.R, 3 * d.r, 3 * d.r);
    return d;
}

MarkovRnnDims check_markov_rnn_bwd_shapes(const Tensor& dout, const Tensor& act, const Tensor& j,
                                          int64_t block_size, const Tensor& dact,
                                          const Tensor& dbias, const Tensor& s_prev) {
    const MarkovRnnDims d =
        check_markov_rnn_common(act, j, dout, block_size, "markov_rnn_bwd", "dout");
    DF_CHECK(dact.shape() == act.shape() && s_prev.shape() == dout.shape() && dbias.rank() == 1 &&
                 dbias.dim(0) == 3 * d.r && dbias.dtype() == DType::f32,
             "markov_rnn_bwd: dact {}, s_prev {}, dbias {}; expected [{}, {}], [{}, {}] and f32 "
             "[{}]",
             dact.describe(), s_prev.describe(), dbias.describe(), d.R, 3 * d.r, d.R, d.r, 3 * d.r);
    return d;
}

// ---- DFlash2: the candidate selector's pair scores and top-K ------------------------------------

namespace {

SelectorDims check_selector_common(const Tensor& z, const Tensor& pred, const Tensor& cand,
                                   const Tensor& a, const Tensor& bc, const Tensor& scores,
                                   const char* op) {
    DF_CHECK(z.rank() == 2, "{}: z is {}; expected [P, r]", op, z.describe());
    SelectorDims d;
    d.P = z.dim(0);
    d.r = z.dim(1);
    DF_CHECK(pred.rank() == 2 && pred.dtype() == DType::i32 && pred.dim(0) == d.P,
             "{}: pred is {}; expected i32 [P={}, Kp]", op, pred.describe(), d.P);
    DF_CHECK(cand.rank() == 2 && cand.dtype() == DType::i32 && cand.dim(0) == d.P,
             "{}: cand is {}; expected i32 [P={}, K]", op, cand.describe(), d.P);
    d.Kp = pred.dim(1);
    d.K = cand.dim(1);
    DF_CHECK(a.rank() == 2 && a.dim(1) == d.r, "{}: predecessor codebook is {}; expected [V, r={}]",
             op, a.describe(), d.r);
    d.V = a.dim(0);
    DF_CHECK(bc.shape() == a.shape(),
             "{}: successor codebook is {}; expected {} like the predecessor codebook", op,
             bc.describe(), a.shape().to_string());
    DF_CHECK(scores.dtype() == DType::f32 && scores.shape() == Shape({d.P, d.Kp, d.K}),
             "{}: scores is {}; expected f32 [P={}, Kp={}, K={}]", op, scores.describe(), d.P, d.Kp,
             d.K);
    return d;
}

}  // namespace

SelectorDims check_selector_scores_fwd_shapes(const Tensor& z, const Tensor& pred,
                                              const Tensor& cand, const Tensor& a, const Tensor& bc,
                                              const Tensor& out) {
    return check_selector_common(z, pred, cand, a, bc, out, "selector_scores_fwd");
}

SelectorDims check_selector_scores_bwd_shapes(const Tensor& dscores, const Tensor& z,
                                              const Tensor& pred, const Tensor& cand,
                                              const Tensor& a, const Tensor& bc, const Tensor& dz,
                                              const Tensor& da, const Tensor& dbc) {
    const SelectorDims d =
        check_selector_common(z, pred, cand, a, bc, dscores, "selector_scores_bwd");
    DF_CHECK(dz.shape() == z.shape() && da.shape() == a.shape() && dbc.shape() == bc.shape(),
             "selector_scores_bwd: dz {}, dA {}, dB {}; expected the shapes of z {} and the "
             "codebooks {}",
             dz.describe(), da.describe(), dbc.describe(), z.describe(), a.describe());
    return d;
}

void check_topk_shapes(const Tensor& x, const Tensor& values, const Tensor& indices) {
    DF_CHECK(x.rank() == 2 && x.dtype() == DType::f32, "topk_rows: x is {}; expected f32 [R, V]",
             x.describe());
    DF_CHECK(values.rank() == 2 && values.dtype() == DType::f32 && values.dim(0) == x.dim(0),
             "topk_rows: values is {}; expected f32 [R={}, K]", values.describe(), x.dim(0));
    const int64_t k = values.dim(1);
    DF_CHECK(k >= 1 && k <= x.dim(1), "topk_rows: K={} is outside [1, V={}]", k, x.dim(1));
    DF_CHECK(indices.dtype() == DType::i32 && indices.shape() == values.shape(),
             "topk_rows: indices is {}; expected i32 [R={}, K={}]", indices.describe(), x.dim(0),
             k);
}

// ---- DFlash2: the selector loss -----------------------------------------------------------------

namespace {

// t is dtype [R] (or [R, K] when k > 0).
void check_rows(const Tensor& t, DType dtype, int64_t rows, int64_t k, const char* op,
                const char* name) {
    const bool ok =
        t.dtype() == dtype &&
        (k > 0 ? t.rank() == 2 && t.dim(0) == rows && t.dim(1) == k : t.numel() == rows);
    DF_CHECK(ok, "{}: {} is {}; expected {} [{}{}]", op, name, t.describe(), dtype_name(dtype),
             rows, k > 0 ? fmt::format(", {}", k) : std::string());
}

}  // namespace

SelectorLossDims check_selector_inject_shapes(const Tensor& logits, const Tensor& labels,
                                              const Tensor& values, const Tensor& ids,
                                              const Tensor& label_pos, const Tensor& hit) {
    constexpr const char* op = "selector_inject";
    DF_CHECK(logits.rank() == 2 && logits.dtype() == DType::f32,
             "{}: logits is {}; expected f32 [R, V]", op, logits.describe());
    DF_CHECK(values.rank() == 2, "{}: values is {}; expected f32 [R, K]", op, values.describe());
    const SelectorLossDims d{logits.dim(0), values.dim(1)};
    DF_CHECK(d.K >= 1 && d.K <= logits.dim(1), "{}: K={} is outside [1, V={}]", op, d.K,
             logits.dim(1));
    check_rows(values, DType::f32, d.R, d.K, op, "values");
    check_rows(ids, DType::i32, d.R, d.K, op, "ids");
    check_rows(labels, DType::i32, d.R, 0, op, "labels");
    check_rows(label_pos, DType::i32, d.R, 0, op, "label_pos");
    check_rows(hit, DType::i32, d.R, 0, op, "hit");
    return d;
}

SelectorLossDims check_selector_ce_shapes(const SelectorCeArgs& a) {
    constexpr const char* op = "selector_ce";
    DF_CHECK(a.values.rank() == 2, "{}: values is {}; expected f32 [R, K]", op,
             a.values.describe());
    const SelectorLossDims d{a.values.dim(0), a.values.dim(1)};
    check_rows(a.values, DType::f32, d.R, d.K, op, "values");
    DF_CHECK(a.pair.dtype() == DType::f32 && a.pair.numel() == d.R * d.K && a.pair.dim(0) == d.R,
             "{}: pair is {}; expected f32 [R={}, (1,) K={}]", op, a.pair.describe(), d.R, d.K);
    check_rows(a.label_pos, DType::i32, d.R, 0, op, "label_pos");
    check_rows(a.weights, DType::f32, d.R, 0, op, "weights");
    check_rows(a.loss_rows, DType::f32, d.R, 0, op, "loss_rows");
    check_rows(a.pick, DType::i32, d.R, 0, op, "pick");
    DF_CHECK(a.multiplier > 0, "{}: multiplier {} must be > 0", op, a.multiplier);
    const bool grads = !a.grad_weights.empty();
    DF_CHECK(!grads || (!a.dvalues.empty() && !a.dpair.empty()),
             "{}: grad_weights given but dvalues or dpair is missing", op);
    if (grads) {
        check_rows(a.grad_weights, DType::f32, d.R, 0, op, "grad_weights");
        check_rows(a.dvalues, DType::f32, d.R, d.K, op, "dvalues");
        DF_CHECK(a.dpair.dtype() == DType::f32 && a.dpair.numel() == d.R * d.K,
                 "{}: dpair is {}; expected f32 [R={}, K={}]", op, a.dpair.describe(), d.R, d.K);
    }
    return d;
}

int64_t check_selector_stats_shapes(const Tensor& loss_rows, const Tensor& pick,
                                    const Tensor& label_pos, const Tensor& hit,
                                    const Tensor& weights, int64_t block, const Tensor& stats) {
    constexpr const char* op = "selector_stats";
    const int64_t R = loss_rows.numel();
    DF_CHECK(block >= 2 && R % block == 0,
             "{}: block={} must be >= 2 and divide the {} rows (rows are whole blocks)", op, block,
             R);
    check_rows(loss_rows, DType::f32, R, 0, op, "loss_rows");
    check_rows(pick, DType::i32, R, 0, op, "pick");
    check_rows(label_pos, DType::i32, R, 0, op, "label_pos");
    check_rows(hit, DType::i32, R, 0, op, "hit");
    check_rows(weights, DType::f32, R, 0, op, "weights");
    const SelectorStatsLayout lay{block};
    DF_CHECK(stats.dtype() == DType::f32 && stats.numel() == lay.size(),
             "{}: stats is {}; expected f32 [{}] for blocks of {}", op, stats.describe(),
             lay.size(), block);
    return R;
}

SelectorLossDims check_selector_unary_bwd_shapes(const Tensor& dvalues, const Tensor& ids,
                                                 const Tensor& w, const Tensor& out) {
    constexpr const char* op = "selector_unary_bwd";
    DF_CHECK(dvalues.rank() == 2, "{}: dvalues is {}; expected f32 [R, K]", op, dvalues.describe());
    const SelectorLossDims d{dvalues.dim(0), dvalues.dim(1)};
    check_rows(dvalues, DType::f32, d.R, d.K, op, "dvalues");
    check_rows(ids, DType::i32, d.R, d.K, op, "ids");
    DF_CHECK(w.rank() == 2, "{}: w is {}; expected [V, D]", op, w.describe());
    check_rows(out, DType::f32, d.R, w.dim(1), op, "out");
    return d;
}

// ---- mixture of experts -------------------------------------------------------------------------

MoeRouteDims check_moe_route_shapes(const Tensor& logits, const MoeRouting& routing,
                                    const Tensor& experts, const Tensor& weights) {
    constexpr const char* op = "moe_route";
    DF_CHECK(logits.rank() == 2 && logits.dtype() == DType::f32 && logits.dim(1) >= 1,
             "{}: logits is {}; expected f32 [R, E] with E >= 1", op, logits.describe());
    const MoeRouteDims d{logits.dim(0), logits.dim(1), routing.k};
    DF_CHECK(d.k >= 1 && d.k <= d.E, "{}: k={} is outside [1, E={}]", op, d.k, d.E);
    check_rows(experts, DType::i32, d.R, d.k, op, "experts");
    check_rows(weights, DType::f32, d.R, d.k, op, "weights");
    return d;
}

MoeExpertsDims check_moe_experts_shapes(const Tensor& x, const Tensor& experts,
                                        const Tensor& weights, const MoeExperts& w,
                                        const Tensor& out) {
    constexpr const char* op = "moe_experts";
    DF_CHECK(x.rank() == 2 && x.dim(1) >= 1, "{}: x is {}; expected [R, D] with D >= 1", op,
             x.describe());
    DF_CHECK(experts.rank() == 2 && experts.dim(1) >= 1, "{}: experts is {}; expected i32 [R, k]",
             op, experts.describe());
    // The expert matrices: gate_up [E, 2I, D] in x's dtype, or its MXFP4 blocks [E, 2I, D/32, 16].
    const Tensor& gu = w.mxfp4() ? w.gate_up_blocks : w.gate_up;
    DF_CHECK(
        gu.rank() == (w.mxfp4() ? 4 : 3) && gu.dim(1) % 2 == 0 && gu.dim(1) >= 2 && gu.dim(0) >= 1,
        "{}: {} is {}; expected [E, 2I, {}] with E, I >= 1", op,
        w.mxfp4() ? "gate_up_blocks" : "gate_up", gu.describe(), w.mxfp4() ? "D/32, 16" : "D");
    MoeExpertsDims d;
    d.R = x.dim(0);
    d.D = x.dim(1);
    d.k = experts.dim(1);
    d.E = gu.dim(0);
    d.I = gu.dim(1) / 2;
    check_rows(experts, DType::i32, d.R, d.k, op, "experts");
    check_rows(weights, DType::f32, d.R, d.k, op, "weights");
    const DType dt = x.dtype();
    const auto shaped = [&](const Tensor& t, Shape want, const char* name) {
        DF_CHECK(t.dtype() == dt && t.shape() == want, "{}: {} is {}; expected {} {} (x's dtype)",
                 op, name, t.describe(), dtype_name(dt), want.to_string());
    };
    shaped(out, Shape{d.R, d.D}, "out");
    if (w.mxfp4()) {
        DF_CHECK(w.gate_up.empty() && w.down.empty(),
                 "{}: MXFP4 experts (gate_up_blocks {}) with gate_up {} / down {} as well; give "
                 "one form",
                 op, gu.describe(), w.gate_up.describe(), w.down.describe());
        DF_CHECK(d.D % 32 == 0 && d.I % 32 == 0,
                 "{}: MXFP4 experts need D and I multiples of 32 (one scale per 32 values), got "
                 "D={} I={}",
                 op, d.D, d.I);
        const auto bytes = [&](const Tensor& t, Shape want, const char* name) {
            DF_CHECK(t.dtype() == DType::u8 && t.shape() == want, "{}: {} is {}; expected u8 {}",
                     op, name, t.describe(), want.to_string());
        };
        bytes(w.gate_up_blocks, Shape{d.E, 2 * d.I, d.D / 32, 16}, "gate_up_blocks");
        bytes(w.gate_up_scales, Shape{d.E, 2 * d.I, d.D / 32}, "gate_up_scales");
        bytes(w.down_blocks, Shape{d.E, d.D, d.I / 32, 16}, "down_blocks");
        bytes(w.down_scales, Shape{d.E, d.D, d.I / 32}, "down_scales");
    } else {
        DF_CHECK(w.gate_up_scales.empty() && w.down_blocks.empty() && w.down_scales.empty(),
                 "{}: MXFP4 scales or down blocks without gate_up_blocks", op);
        shaped(w.gate_up, Shape{d.E, 2 * d.I, d.D}, "gate_up");
        shaped(w.down, Shape{d.E, d.D, d.I}, "down");
    }
    if (!w.gate_up_bias.empty()) shaped(w.gate_up_bias, Shape{d.E, 2 * d.I}, "gate_up_bias");
    if (!w.down_bias.empty()) shaped(w.down_bias, Shape{d.E, d.D}, "down_bias");
    DF_CHECK(w.activation != MoeActivation::clamped_swiglu || w.limit > 0.0f,
             "{}: clamped_swiglu needs limit > 0, got {}", op, w.limit);
    return d;
}

// ---- AdamW's per-step scalars (declared in backend/ops.h) ---------------------------------------

AdamWStepScalars adamw_step_scalars(const AdamWParams& p) {
    const double t = static_cast<double>(p.step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(p.beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(p.beta2), t);
    AdamWStepScalars s;
    s.decay = static_cast<float>(1.0 - static_cast<double>(p.lr) * p.weight_decay);
    s.step_size = static_cast<float>(static_cast<double>(p.lr) / bc1);
    s.bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    return s;
}

// ---- Gated DeltaNet -----------------------------------------------------------------------------

namespace {

// t has exactly `want` and dtype `dt`.
void check_gdn_tensor(const Tensor& t, DType dt, const Shape& want, const char* op,
                      const char* name) {
    DF_CHECK(t.dtype() == dt && t.shape() == want, "{}: {} is {}; expected {} {}", op, name,
             t.describe(), dtype_name(dt), want.to_string());
}

void check_gdn_count(const Tensor& count, const char* op) {
    DF_CHECK(count.dtype() == DType::i32 && count.numel() == 1, "{}: count is {}; expected i32 [1]",
             op, count.describe());
}

// The delta rule's inputs (gdn_prepare's outputs): q, k f32 [S, Hk, dk], v f32 [S, Hv, dv] with Hv
// a multiple of Hk, g and beta f32 [S, Hv]. Returns the sizes.
GdnDims check_gdn_rule_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const char* op) {
    DF_CHECK(q.rank() == 3 && q.dim(1) >= 1 && q.dim(2) >= 1,
             "{}: q is {}; expected f32 [S, Hk, dk] with Hk, dk >= 1", op, q.describe());
    DF_CHECK(v.rank() == 3 && v.dim(1) >= 1 && v.dim(2) >= 1,
             "{}: v is {}; expected f32 [S, Hv, dv] with Hv, dv >= 1", op, v.describe());
    const GdnDims d{q.dim(0), q.dim(1), q.dim(2), v.dim(1), v.dim(2)};
    DF_CHECK(d.Hv % d.Hk == 0, "{}: Hv={} value heads (v {}) is not a multiple of Hk={} (q {})", op,
             d.Hv, v.describe(), d.Hk, q.describe());
    check_gdn_tensor(q, DType::f32, Shape{d.S, d.Hk, d.dk}, op, "q");
    check_gdn_tensor(k, DType::f32, Shape{d.S, d.Hk, d.dk}, op, "k");
    check_gdn_tensor(v, DType::f32, Shape{d.S, d.Hv, d.dv}, op, "v");
    check_gdn_tensor(g, DType::f32, Shape{d.S, d.Hv}, op, "g");
    check_gdn_tensor(beta, DType::f32, Shape{d.S, d.Hv}, op, "beta");
    return d;
}

}  // namespace

GdnConvDims check_gdn_conv_shapes(const Tensor& x, const Tensor& w, const Tensor& state,
                                  const Tensor& y) {
    constexpr const char* op = "gdn_conv";
    DF_CHECK(x.rank() == 2 && x.dim(1) >= 1, "{}: x is {}; expected [S, C] with C >= 1", op,
             x.describe());
    DF_CHECK(w.rank() == 2 && w.dim(1) >= 2,
             "{}: w is {}; expected [C, K] with K >= 2 (HF's conv1d.weight [C, 1, K] viewed)", op,
             w.describe());
    const GdnConvDims d{x.dim(0), x.dim(1), w.dim(1)};
    check_gdn_tensor(w, x.dtype(), Shape{d.C, d.K}, op, "w");
    check_gdn_tensor(y, x.dtype(), Shape{d.S, d.C}, op, "y");
    check_gdn_tensor(state, DType::f32, Shape{d.K - 1, d.C}, op, "state");
    return d;
}

GdnConvDims check_gdn_conv_advance_shapes(const Tensor& state, const Tensor& x,
                                          const Tensor& count) {
    constexpr const char* op = "gdn_conv_advance";
    DF_CHECK(state.rank() == 2 && state.dtype() == DType::f32 && state.dim(0) >= 1,
             "{}: state is {}; expected f32 [K-1, C] with K >= 2", op, state.describe());
    const GdnConvDims d{x.rank() == 2 ? x.dim(0) : 0, state.dim(1), state.dim(0) + 1};
    DF_CHECK(x.rank() == 2 && x.dim(1) == d.C, "{}: x is {}; expected [S, C={}] (state {})", op,
             x.describe(), d.C, state.describe());
    check_gdn_count(count, op);
    return d;
}

GdnDims check_gdn_prepare_shapes(const Tensor& conv_out, const Tensor& b, const Tensor& a,
                                 const Tensor& a_log, const Tensor& dt_bias, const Tensor& q,
                                 const Tensor& k, const Tensor& v, const Tensor& g,
                                 const Tensor& beta) {
    constexpr const char* op = "gdn_prepare";
    const GdnDims d = check_gdn_rule_inputs(q, k, v, g, beta, op);
    const int64_t C = 2 * d.Hk * d.dk + d.Hv * d.dv;
    DF_CHECK(conv_out.rank() == 2 && conv_out.dim(0) == d.S && conv_out.dim(1) == C,
             "{}: conv_out is {}; expected [S={}, 2*Hk*dk + Hv*dv = {}] for q {} and v {}", op,
             conv_out.describe(), d.S, C, q.describe(), v.describe());
    check_gdn_tensor(b, conv_out.dtype(), Shape{d.S, d.Hv}, op, "b");
    check_gdn_tensor(a, conv_out.dtype(), Shape{d.S, d.Hv}, op, "a");
    DF_CHECK(a_log.rank() == 1 && a_log.dim(0) == d.Hv, "{}: a_log is {}; expected [Hv={}]", op,
             a_log.describe(), d.Hv);
    DF_CHECK(dt_bias.rank() == 1 && dt_bias.dim(0) == d.Hv, "{}: dt_bias is {}; expected [Hv={}]",
             op, dt_bias.describe(), d.Hv);
    return d;
}

GdnDims check_gdn_rule_shapes(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                              const Tensor& beta, const Tensor& state, const Tensor& o,
                              const Tensor& count, bool o_optional, const char* op) {
    const GdnDims d = check_gdn_rule_inputs(q, k, v, g, beta, op);
    check_gdn_tensor(state, DType::f32, Shape{d.Hv, d.dk, d.dv}, op, "state");
    if (!(o_optional && o.empty()))
        check_gdn_tensor(o, DType::f32, Shape{d.S, d.Hv, d.dv}, op, "o");
    if (!count.empty()) check_gdn_count(count, op);
    return d;
}

GdnDims check_gdn_gated_norm_shapes(const Tensor& o, const Tensor& z, const Tensor& w, float eps,
                                    const Tensor& y) {
    constexpr const char* op = "gdn_gated_norm";
    DF_CHECK(o.rank() == 3 && o.dtype() == DType::f32 && o.dim(1) >= 1 && o.dim(2) >= 1,
             "{}: o is {}; expected f32 [S, Hv, dv] with Hv, dv >= 1", op, o.describe());
    GdnDims d;
    d.S = o.dim(0);
    d.Hv = o.dim(1);
    d.dv = o.dim(2);
    check_gdn_tensor(z, z.dtype(), Shape{d.S, d.Hv * d.dv}, op, "z");
    check_gdn_tensor(y, z.dtype(), Shape{d.S, d.Hv * d.dv}, op, "y");
    check_gdn_tensor(w, z.dtype(), Shape{d.dv}, op, "w");
    DF_CHECK(eps > 0.0f, "{}: eps={} must be > 0", op, eps);
    return d;
}

}  // namespace dflash

// Shared op argument checks. Tested by tests/ops/{gemm,adamw,lm_head_ce,embedding}_test.cpp.
#include "backend/op_shapes.h"

#include <cmath>

namespace dflash {
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

void check_adamw_args(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                      const AdamWParams& p) {
    DF_CHECK(grad.numel() == master.numel() && m.numel() == master.numel() &&
                 v.numel() == master.numel(),
             "adamw_step: master {} grad {} m {} v {} must have the same element count",
             master.shape().to_string(), grad.shape().to_string(), m.shape().to_string(),
             v.shape().to_string());
    DF_CHECK(p.step >= 1, "adamw_step: step={} but steps are 1-based (bias correction)", p.step);
    DF_CHECK(p.beta1 >= 0 && p.beta1 < 1 && p.beta2 >= 0 && p.beta2 < 1,
             "adamw_step: betas ({}, {}) must lie in [0, 1)", p.beta1, p.beta2);
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

void check_lm_head_ce_shapes(const Tensor& h, const Tensor& w, const Tensor& labels,
                             const Tensor& weights, int64_t chunk, const LmHeadCeOut& out) {
    DF_CHECK(h.rank() == 2, "lm_head_ce: h is {}, expected [R, D]", h.describe());
    const int64_t r = h.dim(0), d = h.dim(1);
    DF_CHECK(w.rank() == 2 && w.dim(1) == d && w.dim(0) >= 1,
             "lm_head_ce: w is {}, expected [V, D={}] with V >= 1 (h is {})", w.describe(), d,
             h.describe());
    DF_CHECK(labels.dtype() == DType::i32 && labels.shape() == Shape({r}),
             "lm_head_ce: labels is {}, expected i32 [R={}]", labels.describe(), r);
    DF_CHECK(weights.dtype() == DType::f32 && weights.shape() == Shape({r}),
             "lm_head_ce: weights is {}, expected f32 [R={}]", weights.describe(), r);
    DF_CHECK(chunk >= 1, "lm_head_ce: chunk={}, expected >= 1 rows of w per step", chunk);
    DF_CHECK(out.loss_rows.empty() ||
                 (out.loss_rows.dtype() == DType::f32 && out.loss_rows.shape() == Shape({r})),
             "lm_head_ce: loss_rows is {}, expected f32 [R={}]", out.loss_rows.describe(), r);
    DF_CHECK(out.argmax.empty() ||
                 (out.argmax.dtype() == DType::i32 && out.argmax.shape() == Shape({r})),
             "lm_head_ce: argmax is {}, expected i32 [R={}]", out.argmax.describe(), r);
    DF_CHECK(out.dh.empty() || out.dh.shape() == h.shape(),
             "lm_head_ce: dh is {}, expected {} like h", out.dh.describe(), h.shape().to_string());
    DF_CHECK(out.dw.empty() || (out.dw.dtype() == DType::f32 && out.dw.shape() == w.shape()),
             "lm_head_ce: dw is {}, expected f32 {} like w", out.dw.describe(),
             w.shape().to_string());
}

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

}  // namespace dflash

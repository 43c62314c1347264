// Shared op argument checks. Tested by
// tests/ops/{gemm,adamw,lm_head_ce,lm_head_kl,embedding}_test.cpp.
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
                             const Tensor& weights, int64_t chunk, const LmHeadKlOut& out) {
    check_lm_head_common("lm_head_kl", h, w, weights, chunk, out.loss_rows, out.argmax, out.dh,
                         out.dw);
    DF_CHECK(t.dtype() == h.dtype() && t.shape() == h.shape(),
             "lm_head_kl: the teacher's hidden states t are {}, expected {} like h", t.describe(),
             h.describe());
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

// Shared op argument checks. Tested by tests/ops/gemm_test.cpp and tests/ops/adamw_test.cpp.
#include "backend/op_shapes.h"

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

}  // namespace dflash

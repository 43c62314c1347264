// Shared DFlash2 op argument checks. Tested by tests/ops/{dyn_conv,selector_scores,topk}_test.cpp.
#include "backend/dflash2_op_shapes.h"

#include "core/error.h"

namespace dflash {

DynConvDims check_dyn_conv_shapes(const Tensor& x, const Tensor& base, const Tensor& delta,
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

SelectorDims check_selector_shapes(const Tensor& z, const Tensor& pred, const Tensor& cand,
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

}  // namespace dflash

// Shared DFlash2 op argument checks. Tested by tests/ops/{dyn_conv,selector_scores,topk,
// selector_loss}_test.cpp.
#include "backend/dflash2_op_shapes.h"

#include <fmt/format.h>

#include <string>

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

}  // namespace dflash

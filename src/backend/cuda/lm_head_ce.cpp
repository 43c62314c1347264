// cuda::lm_head_ce: the LM head + cross-entropy over vocabulary chunks, never the whole [R, V]
// logits, with the CPU reference's semantics (backend/cpu/lm_head_ce.cpp). Host code: checks,
// workspace carving, and the sequence of cuBLASLt GEMMs and row kernels (kernels/lm_head_ce.cu).
// Tested by tests/cuda/lm_head_ce_cuda_test.cpp; measured by bench/cuda/lm_head_ce_bench.cpp.
//
// Note [Flash-style dh]
// Pass 1 walks the chunks once: logits_c = h · w_cᵀ (f32), then per row the running max M, the
// sum l of exp(logit - M), the argmax and the label logit. When dh is asked it also writes
// P_c = exp(logits_c - M) in bf16 with the label's column zeroed, rescales the dh accumulator's
// row by exp(M_old - M) when M grew, and adds P_c · w_c into it (a GEMM with beta = 1): the
// accumulator ends as acc = sum over v != label of e_v w_v, and with rest = sum over v != label of
// e_v (the same bf16 values), dh = grad_scale * weight * (acc - rest * w_label) / l, which is
// grad_scale * weight * (softmax - onehot) · w without the cancellation that subtracting w_label
// from sum_v p_v w_v would suffer when the label's probability is near 1. So dh costs one GEMM per
// chunk in this pass instead of a second pass recomputing the logits.
// dw needs each row's final log-sum-exp inside a sum over rows, so it takes pass 2: logits_c again,
// g = grad_scale * weight * (softmax - onehot) in bf16, dw_c += gᵀ · h.
// GEMMs: 1 per chunk (loss only), 2 (with dh), 4 (with dw, with or without dh; 3 with dw alone).
#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/lm_head_ce.h"
#include "backend/cuda/kernels/row_stats.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"
#include "core/error.h"

namespace dflash::cuda {
namespace {

void check_inputs(const Exec& ex, const Tensor& h, const Tensor& w, const Tensor& labels,
                  const Tensor& weights, int64_t chunk, const LmHeadCeOut& out) {
    for (const auto& [t, name] :
         {std::pair{&h, "h"}, std::pair{&w, "w"}, std::pair{&labels, "labels"},
          std::pair{&weights, "weights"}, std::pair{&out.loss_rows, "loss_rows"},
          std::pair{&out.argmax, "argmax"}, std::pair{&out.dh, "dh"}, std::pair{&out.dw, "dw"},
          std::pair{&out.workspace, "workspace"}}) {
        check_device(ex, *t, "lm_head_ce", name);
    }
    DF_CHECK(h.dtype() == DType::bf16 && w.dtype() == DType::bf16 &&
                 (out.dh.empty() || out.dh.dtype() == DType::bf16 || out.dh.dtype() == DType::f32),
             "lm_head_ce: h {}, w {}, dh {}; the CUDA op takes bf16 h and w, bf16 or f32 dh",
             h.describe(), w.describe(), out.dh.describe());
    check_lm_head_ce_shapes(h, w, labels, weights, chunk, out);
    const int64_t r = h.dim(0), d = h.dim(1);
    DF_CHECK(w.dim(0) <= INT32_MAX, "lm_head_ce: vocabulary {} does not fit the i32 argmax",
             w.dim(0));
    const int64_t need = lm_head_ce_workspace(r, d, w.dim(0), chunk);
    DF_CHECK(out.workspace.empty() ||
                 (out.workspace.dtype() == DType::f32 && out.workspace.numel() >= need),
             "lm_head_ce: workspace is {}, expected f32 with >= {} elements "
             "(Backend::lm_head_ce_workspace({}, {}, {}, {}))",
             out.workspace.describe(), need, r, d, w.dim(0), chunk);
}

// The workspace's parts as tensors and pointers.
struct Parts {
    float* base = nullptr;
    LmHeadCeLayout lay;
    DeviceRef dev;
    Tensor logits(int64_t rows, int64_t n) const {
        return Tensor(base + lay.logits, DType::f32, Shape{rows, n}, dev);
    }
    Tensor probs(int64_t rows, int64_t n) const {
        return Tensor(base + lay.probs, DType::bf16, Shape{rows, n}, dev);
    }
    LmRowArrays rows() const {
        LmRowArrays a;
        a.row_max = base + lay.row_max;
        a.row_sum = base + lay.row_sum;
        a.row_rest = base + lay.row_rest;
        a.label_logit = base + lay.label_logit;
        a.row_arg = reinterpret_cast<int32_t*>(base + lay.row_arg);
        a.lse = base + lay.lse;
        return a;
    }
};

}  // namespace

// The chunk layout, then the f32 [R, D] dh accumulator (used when dh is bf16).
int64_t lm_head_ce_workspace(int64_t rows, int64_t dim, int64_t vocab, int64_t chunk) {
    DF_CHECK(rows >= 0 && dim >= 1 && vocab >= 1 && chunk >= 1,
             "lm_head_ce_workspace: rows={} dim={} vocab={} chunk={}", rows, dim, vocab, chunk);
    return lm_head_ce_layout(rows, vocab, chunk).total + rows * dim;
}

void lm_head_ce(const Exec& ex, const Tensor& h, const Tensor& w, const Tensor& labels,
                const Tensor& weights, float grad_scale, int64_t chunk, const LmHeadCeOut& out) {
    check_inputs(ex, h, w, labels, weights, chunk, out);
    const int64_t r = h.dim(0), d = h.dim(1), v = w.dim(0);
    if (r == 0) return;
    const int64_t step = lm_step(v, chunk), chunks = lm_chunk_count(v, step);
    // The caller's workspace, or (op tests) a temporary of the same size.
    const LmHeadCeLayout lay = lm_head_ce_layout(r, v, chunk);
    float* base = out.workspace.empty()
                      ? ex.scratch->take_n<float>(static_cast<size_t>(lay.total),
                                                  "lm_head_ce workspace (none given)")
                      : out.workspace.f32();
    const Parts ws{base, lay, h.device()};
    const LmRowArrays st = ws.rows();
    const bool want_dh = !out.dh.empty(), want_dw = !out.dw.empty();
    // The dh accumulator (f32 [R, D]): dh itself when f32, else a temporary (see Note [Flash-style
    // dh]); bf16 dh is written once at the end.
    Tensor acc;
    if (want_dh) {
        float* acc_mem = !out.workspace.empty()
                             ? base + lay.total
                             : ex.scratch->take_n<float>(static_cast<size_t>(r * d),
                                                         "lm_head_ce dh accumulator f32 [R, D]");
        acc = out.dh.dtype() == DType::f32
                  ? out.dh
                  : Tensor(acc_mem, DType::f32, Shape{r, d}, out.dh.device());
    }

    for (int64_t c = 0; c < chunks; ++c) {  // pass 1: statistics (and dh)
        const int64_t v0 = lm_chunk_begin(c, step), n = lm_chunk_size(c, v, step);
        const Tensor wc = w.rows(v0, v0 + n);
        const Tensor logits = ws.logits(r, n);
        gemm(ex, h, false, wc, true, logits, 1.0f, 0.0f);
        LmStatsArgs a;
        a.logits = logits.f32();
        a.rows = r, a.n = n, a.v0 = v0;
        a.labels = labels.i32();
        a.weights = weights.f32();
        a.st = st;
        a.first = c == 0, a.last = c + 1 == chunks;
        if (want_dh) {
            a.probs = ws.probs(r, n).bf16();
            a.dh_acc = acc.f32();
            a.dim = d;
        }
        a.loss_rows = out.loss_rows.empty() ? nullptr : out.loss_rows.f32();
        a.argmax = out.argmax.empty() ? nullptr : out.argmax.i32();
        lm_stats_chunk(a, ex.stream);
        if (want_dh) gemm(ex, ws.probs(r, n), false, wc, false, acc, 1.0f, c == 0 ? 0.0f : 1.0f);
    }
    if (want_dh) {
        lm_dh_finalize(acc.f32(), w.bf16(), v, labels.i32(), weights.f32(), grad_scale, st, r, d,
                       out.dh.data(), out.dh.dtype() == DType::bf16, ex.stream);
    }
    if (!want_dw) return;
    for (int64_t c = 0; c < chunks; ++c) {  // pass 2: dw
        const int64_t v0 = lm_chunk_begin(c, step), n = lm_chunk_size(c, v, step);
        const Tensor wc = w.rows(v0, v0 + n);
        const Tensor logits = ws.logits(r, n), g = ws.probs(r, n);
        gemm(ex, h, false, wc, true, logits, 1.0f, 0.0f);
        lm_grad_chunk(logits.f32(), r, n, v0, labels.i32(), weights.f32(), grad_scale, st.lse,
                      g.bf16(), ex.stream);
        gemm(ex, g, true, h, false, out.dw.rows(v0, v0 + n), 1.0f, 1.0f);
    }
}

}  // namespace dflash::cuda

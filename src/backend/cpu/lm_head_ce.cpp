// Chunked LM head + cross-entropy, fp32 reference. Tested by tests/ops/lm_head_ce_test.cpp.
//
// The logits h · Wᵀ are never held whole: each step computes [R, chunk] of them
// (lm_head_chunks.h). Pass 1
// keeps, per row, a running max and a sum of exp(logit - max) rescaled whenever the max grows
// (online log-sum-exp, sum in double), the label's logit and the argmax. Pass 2 (only when a
// gradient is asked for) recomputes each chunk's logits and turns them into
// g = grad_scale * weight_r * (softmax - onehot(label)) before the two gradient products.
// Rows are independent, so the per-row loops are parallel and deterministic for any thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/lm_head_chunks.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

// Per-row state of the online log-sum-exp over vocabulary chunks.
struct RowStats {
    std::vector<float> max;          // [R] running max logit
    std::vector<double> sum;         // [R] sum of exp(logit - max)
    std::vector<float> label_logit;  // [R]
    std::vector<int32_t> argmax;     // [R] lowest index of the max
};

void check_inputs(const Tensor& h, const Tensor& w, const Tensor& labels, const Tensor& weights,
                  int64_t chunk, const LmHeadCeOut& out) {
    DF_CHECK(h.dtype() == DType::f32 && w.dtype() == DType::f32 &&
                 (out.dh.empty() || out.dh.dtype() == DType::f32),
             "lm_head_ce: h {}, w {}, dh {}; the CPU op takes f32", h.describe(), w.describe(),
             out.dh.describe());
    check_lm_head_ce_shapes(h, w, labels, weights, chunk, out);
    const int64_t r = h.dim(0);
    for (const Tensor* t :
         {&h, &w, &labels, &weights, &out.loss_rows, &out.argmax, &out.dh, &out.dw}) {
        DF_CHECK(t->empty() || t->device().kind == DeviceKind::cpu,
                 "lm_head_ce: {} is not a CPU tensor", t->describe());
    }
    const int64_t v = w.dim(0);
    const int32_t* lab = labels.i32();
    const float* wt = weights.f32();
    for (int64_t i = 0; i < r; ++i) {
        DF_CHECK(wt[i] == 0.0f || (lab[i] >= 0 && lab[i] < v),
                 "lm_head_ce: labels[{}]={} with weight {} is outside the vocabulary [0, {}) "
                 "(rows that are not trained must have weight 0)",
                 i, lab[i], wt[i], v);
    }
}

// Folds one row of chunk logits into the row's running statistics.
void update_row(const float* row, int64_t i, int64_t v0, int64_t n, const int32_t* labels,
                RowStats& st) {
    float cmax = st.max[i];
    int32_t arg = st.argmax[i];
    for (int64_t c = 0; c < n; ++c) {
        if (row[c] > cmax) cmax = row[c], arg = static_cast<int32_t>(v0 + c);
    }
    // Rescale the running sum to the new max so no exp overflows.
    double sum = st.sum[i] == 0.0 ? 0.0 : st.sum[i] * std::exp(double(st.max[i]) - cmax);
    for (int64_t c = 0; c < n; ++c) sum += std::exp(double(row[c]) - cmax);
    st.max[i] = cmax;
    st.sum[i] = sum;
    st.argmax[i] = arg;
    const int64_t lab = labels[i];
    if (lab >= v0 && lab < v0 + n) st.label_logit[i] = row[lab - v0];
}

void update_stats(const Exec& ex, const float* logits, int64_t r, int64_t v0, int64_t n,
                  const int32_t* labels, RowStats& st) {
    parallel_for(ex, r, r > 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) update_row(logits + i * n, i, v0, n, labels, st);
    });
}

// g[R, n] (in place over the chunk's logits) = grad_scale * weight_r * (softmax - onehot).
void softmax_grad(const Exec& ex, float* logits, int64_t r, int64_t v0, int64_t n,
                  const int32_t* lab, const float* wt, float grad_scale,
                  const std::vector<double>& lse) {
    parallel_for(ex, r, r > 1, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            float* row = logits + i * n;
            const double coef = double(grad_scale) * wt[i];
            for (int64_t c = 0; c < n; ++c) {
                const double onehot = (lab[i] == v0 + c) ? 1.0 : 0.0;
                row[c] =
                    coef == 0.0
                        ? 0.0f
                        : static_cast<float>(coef * (std::exp(double(row[c]) - lse[i]) - onehot));
            }
        }
    });
}

}  // namespace

void lm_head_ce(const Exec& ex, const Tensor& h, const Tensor& w, const Tensor& labels,
                const Tensor& weights, float grad_scale, int64_t chunk, const LmHeadCeOut& out) {
    check_inputs(h, w, labels, weights, chunk, out);
    const int64_t r = h.dim(0), v = w.dim(0);
    const int64_t step = std::min(chunk, v);
    const int32_t* lab = labels.i32();
    const float* wt = weights.f32();
    // [R, chunk]: the caller's workspace when given, else a temporary (op tests).
    std::vector<float> own;
    float* logits = nullptr;
    if (!out.workspace.empty()) {
        check_cpu_f32(out.workspace, "lm_head_ce", "workspace");
        DF_CHECK(out.workspace.numel() >= r * step,
                 "lm_head_ce: workspace has {} elements, expected >= {} (lm_head_ce_workspace)",
                 out.workspace.numel(), r * step);
        logits = out.workspace.f32();
    } else {
        own.resize(static_cast<size_t>(r * step));
        logits = own.data();
    }

    RowStats st;
    st.max.assign(r, -std::numeric_limits<float>::infinity());
    st.sum.assign(r, 0.0);
    st.label_logit.assign(r, 0.0f);
    st.argmax.assign(r, 0);
    for (int64_t v0 = 0; v0 < v; v0 += step) {
        const int64_t n = std::min(step, v - v0);
        lm_chunk_logits(ex, h, w, v0, n, logits);
        update_stats(ex, logits, r, v0, n, lab, st);
    }
    std::vector<double> lse(r);  // [R]
    for (int64_t i = 0; i < r; ++i) lse[i] = double(st.max[i]) + std::log(st.sum[i]);
    if (!out.loss_rows.empty()) {
        for (int64_t i = 0; i < r; ++i) {
            out.loss_rows.f32()[i] =
                wt[i] == 0.0f ? 0.0f : static_cast<float>(lse[i] - st.label_logit[i]);
        }
    }
    if (!out.argmax.empty()) std::copy(st.argmax.begin(), st.argmax.end(), out.argmax.i32());
    if (out.dh.empty() && out.dw.empty()) return;

    for (int64_t v0 = 0; v0 < v; v0 += step) {
        const int64_t n = std::min(step, v - v0);
        lm_chunk_logits(ex, h, w, v0, n, logits);
        softmax_grad(ex, logits, r, v0, n, lab, wt, grad_scale, lse);
        lm_chunk_grads(ex, logits, h, w, v0, n, out.dh, out.dw);
    }
}

}  // namespace dflash::cpu

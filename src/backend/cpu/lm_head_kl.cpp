// Chunked LM head + KL distillation, fp32 reference. Tested by tests/ops/lm_head_kl_test.cpp.
//
// Note [Chunked KL]
// Neither the draft logits d = h · Wᵀ nor the teacher's t = t_h · Wᵀ are held whole: each step
// computes [R, chunk] of both. With lse_x = log sum_v exp(x_v),
//   KL(p || q) = sum_v p_v (t_v - lse_t - d_v + lse_d) = E_p[t - d] - lse_t + lse_d,
// so pass 1 keeps, per row, an online log-sum-exp of each side (running max, sum of exp(x - max)
// rescaled when the max grows) and the teacher-weighted sum C = sum_v exp(t_v - max_t) (t_v - d_v),
// rescaled with the teacher's sum; E_p[t - d] = C / sum_t. Pass 2 (only when a gradient is asked
// for) recomputes both chunks and turns them into g = grad_scale * weight_r * (q - p), the
// gradient of weight_r * KL_r with respect to the draft logits, before the two gradient products.
// When d == t the two sides are computed by the same code from the same numbers: the loss and the
// gradient are exactly 0. Rows are independent: parallel and deterministic for any thread count.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/lm_head_chunks.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

// One side's online log-sum-exp.
struct Lse {
    float max = -std::numeric_limits<float>::infinity();
    double sum = 0.0;
    double value() const { return double(max) + std::log(sum); }
};

struct RowStats {
    Lse d, t;
    double cross = 0.0;  // sum_v exp(t_v - t.max) (t_v - d_v)
    int32_t argmax = 0;  // of d, lowest index of the max
};

void check_inputs(const Tensor& h, const Tensor& t, const Tensor& w, const Tensor& weights,
                  int64_t chunk, const LmHeadKlOut& out) {
    DF_CHECK(h.dtype() == DType::f32 && w.dtype() == DType::f32 &&
                 (out.dh.empty() || out.dh.dtype() == DType::f32),
             "lm_head_kl: h {}, w {}, dh {}; the CPU op takes f32", h.describe(), w.describe(),
             out.dh.describe());
    check_lm_head_kl_shapes(h, t, w, weights, chunk, out);
    for (const Tensor* x : {&h, &t, &w, &weights, &out.loss_rows, &out.argmax, &out.dh, &out.dw}) {
        DF_CHECK(x->empty() || x->device().kind == DeviceKind::cpu,
                 "lm_head_kl: {} is not a CPU tensor", x->describe());
    }
}

// Folds one row of both sides' chunk logits into the row's statistics.
void update_row(const float* d, const float* t, int64_t v0, int64_t n, RowStats& st) {
    float dmax = st.d.max, tmax = st.t.max;
    int32_t arg = st.argmax;
    for (int64_t c = 0; c < n; ++c) {
        if (d[c] > dmax) dmax = d[c], arg = static_cast<int32_t>(v0 + c);
        tmax = std::max(tmax, t[c]);
    }
    // Bring the old sums to the new maxima so no exp overflows.
    const double ad = st.d.sum == 0.0 ? 0.0 : std::exp(double(st.d.max) - dmax);
    const double at = st.t.sum == 0.0 ? 0.0 : std::exp(double(st.t.max) - tmax);
    double dsum = st.d.sum * ad, tsum = st.t.sum * at, cross = st.cross * at;
    for (int64_t c = 0; c < n; ++c) {
        dsum += std::exp(double(d[c]) - dmax);
        const double e = std::exp(double(t[c]) - tmax);
        tsum += e;
        cross += e * (double(t[c]) - double(d[c]));
    }
    st.d = {dmax, dsum};
    st.t = {tmax, tsum};
    st.cross = cross;
    st.argmax = arg;
}

}  // namespace

int64_t lm_head_kl_workspace(int64_t rows, int64_t vocab, int64_t chunk) {
    return 2 * rows * std::min(chunk, vocab);
}

void lm_head_kl(const Exec& ex, const Tensor& h, const Tensor& t, const Tensor& w,
                const Tensor& weights, float grad_scale, int64_t chunk, const LmHeadKlOut& out) {
    check_inputs(h, t, w, weights, chunk, out);
    const int64_t r = h.dim(0), v = w.dim(0);
    const int64_t step = std::min(chunk, v);
    const float* wt = weights.f32();
    // Two [R, chunk] blocks (draft, teacher): the caller's workspace when given, else a
    // temporary (op tests).
    std::vector<float> own;
    float* dl = nullptr;
    if (!out.workspace.empty()) {
        check_cpu_f32(out.workspace, "lm_head_kl", "workspace");
        DF_CHECK(out.workspace.numel() >= lm_head_kl_workspace(r, v, chunk),
                 "lm_head_kl: workspace has {} elements, expected >= {} (lm_head_kl_workspace)",
                 out.workspace.numel(), lm_head_kl_workspace(r, v, chunk));
        dl = out.workspace.f32();
    } else {
        own.resize(static_cast<size_t>(lm_head_kl_workspace(r, v, chunk)));
        dl = own.data();
    }
    float* tl = dl + r * step;

    std::vector<RowStats> st(static_cast<size_t>(r));
    for (int64_t v0 = 0; v0 < v; v0 += step) {
        const int64_t n = std::min(step, v - v0);
        lm_chunk_logits(ex, h, w, v0, n, dl);
        lm_chunk_logits(ex, t, w, v0, n, tl);
        parallel_for(ex, r, r > 1, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) update_row(dl + i * n, tl + i * n, v0, n, st[i]);
        });
    }
    std::vector<double> lse_d(r), lse_t(r);
    for (int64_t i = 0; i < r; ++i) lse_d[i] = st[i].d.value(), lse_t[i] = st[i].t.value();
    if (!out.loss_rows.empty()) {
        for (int64_t i = 0; i < r; ++i) {
            const double kl = st[i].cross / st[i].t.sum - lse_t[i] + lse_d[i];
            out.loss_rows.f32()[i] = wt[i] == 0.0f ? 0.0f : static_cast<float>(kl);
        }
    }
    if (!out.argmax.empty()) {
        for (int64_t i = 0; i < r; ++i) out.argmax.i32()[i] = st[i].argmax;
    }
    if (out.dh.empty() && out.dw.empty()) return;

    for (int64_t v0 = 0; v0 < v; v0 += step) {
        const int64_t n = std::min(step, v - v0);
        lm_chunk_logits(ex, h, w, v0, n, dl);
        lm_chunk_logits(ex, t, w, v0, n, tl);
        // g (in place over the draft chunk) = grad_scale * weight * (q - p).
        parallel_for(ex, r, r > 1, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                float* d = dl + i * n;
                const float* tt = tl + i * n;
                const double coef = double(grad_scale) * wt[i];
                for (int64_t c = 0; c < n; ++c) {
                    d[c] = coef == 0.0
                               ? 0.0f
                               : static_cast<float>(coef * (std::exp(double(d[c]) - lse_d[i]) -
                                                            std::exp(double(tt[c]) - lse_t[i])));
                }
            }
        });
        lm_chunk_grads(ex, dl, h, w, v0, n, out.dh, out.dw);
    }
}

}  // namespace dflash::cpu

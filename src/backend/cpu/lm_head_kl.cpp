// Chunked LM head + distribution losses (forward and reverse KL, JSD, TV), fp32 reference with
// double accumulators. Tested by tests/ops/lm_head_kl_test.cpp.
//
// Note [Chunked divergences]
// Neither the draft logits d = h · Wᵀ nor the teacher's t = t_h · Wᵀ are held whole: each pass
// computes [R, chunk] of both. With lse_x = log sum_v exp(x_v), log q = d - lse_d and
// log p = t - lse_t:
//   KL(p || q) = E_p[t - d] - lse_t + lse_d,   KL(q || p) = E_q[d - t] - lse_d + lse_t,
// so pass 1 keeps, per row, an online log-sum-exp of each side (running max, sum of exp(x - max)
// rescaled when the max grows) and the two cross sums C_p = sum_v exp(t_v - max_t) (t_v - d_v)
// and C_q = sum_v exp(d_v - max_d) (d_v - t_v), each rescaled with its own side's sum;
// E_p[t - d] = C_p / sum_t and E_q[d - t] = C_q / sum_d.
// JSD and TV compare p_v with q_v term by term, which needs both normalisers first: a second pass
// (only when the mix has them) sums, with m = (p + q) / 2,
//   JSD = (sum_v p_v log(p_v / m_v) + sum_v q_v log(q_v / m_v)) / 2,   KL(q || m),
//   TV = sum_v |p_v - q_v| / 2,   u = sum of q_v over the v with q_v > p_v.
// log(q_v / m_v) = log(2 / (1 + exp(x))) with x = log p_v - log q_v, evaluated so that it is
// exactly 0 at x = 0 and never overflows (log_ratio_to_mean).
// The last pass (only when a gradient is asked for) recomputes both chunks and writes
// g = grad_scale * weight_r * (the mix of the closed-form gradients w.r.t. the draft logits)
//   kl: q - p            rkl: q (log q - log p - KL(q || p))
//   jsd: q (log(q / m) - KL(q || m)) / 2            tv: q (1[q > p] - u)
// over the draft chunk, before the two gradient products. TV's is the gradient of
// sum_v max(q_v - p_v, 0) (= TV since both sum to 1), taking 0 for max's slope at a tie; it equals
// -q (1[q <= p] - s) with s = sum_{q_v <= p_v} q_v = 1 - u, but gives exactly 0 when q == p. When d
// == t every term is computed by the same code from the same numbers on both sides: loss and
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
    double cross_p = 0.0;  // sum_v exp(t_v - t.max) (t_v - d_v)
    double cross_q = 0.0;  // sum_v exp(d_v - d.max) (d_v - t_v)
    int32_t argmax = 0;    // of d, lowest index of the max
};

// A row's divergences once all statistics passes are done; what the gradient pass reads.
struct RowScalars {
    double lse_d = 0, lse_t = 0;
    double kl = 0, rkl = 0;                    // KL(p || q), KL(q || p)
    double jsd = 0, kl_qm = 0, tv = 0, u = 0;  // the mixed pass's (0 when not run)
};

void check_inputs(const Tensor& h, const Tensor& t, const Tensor& w, const Tensor& weights,
                  int64_t chunk, const LmHeadDivergences& div, const LmHeadKlOut& out) {
    DF_CHECK(h.dtype() == DType::f32 && w.dtype() == DType::f32 &&
                 (out.dh.empty() || out.dh.dtype() == DType::f32),
             "lm_head_kl: h {}, w {}, dh {}; the CPU op takes f32", h.describe(), w.describe(),
             out.dh.describe());
    check_lm_head_kl_shapes(h, t, w, weights, chunk, div, out);
    for (const Tensor* x : {&h, &t, &w, &weights, &out.loss_rows, &out.argmax, &out.dh, &out.dw}) {
        DF_CHECK(x->empty() || x->device().kind == DeviceKind::cpu,
                 "lm_head_kl: {} is not a CPU tensor", x->describe());
    }
}

// log(2 a / (a + b)) for a = exp(la), b = exp(lb), as a function of x = lb - la: exactly 0 at
// x = 0, no overflow for large |x| (expm1 of a non-positive argument lies in [-1, 0]).
double log_ratio_to_mean(double x) {
    return x <= 0.0 ? -std::log1p(0.5 * std::expm1(x)) : -x - std::log1p(0.5 * std::expm1(-x));
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
    double dsum = st.d.sum * ad, tsum = st.t.sum * at;
    double cross_p = st.cross_p * at, cross_q = st.cross_q * ad;
    for (int64_t c = 0; c < n; ++c) {
        const double diff = double(t[c]) - double(d[c]);
        const double ed = std::exp(double(d[c]) - dmax);
        const double et = std::exp(double(t[c]) - tmax);
        dsum += ed;
        tsum += et;
        cross_p += et * diff;
        cross_q -= ed * diff;
    }
    st.d = {dmax, dsum};
    st.t = {tmax, tsum};
    st.cross_p = cross_p;
    st.cross_q = cross_q;
    st.argmax = arg;
}

// Adds one row of a chunk to the mixed pass's sums (JSD, KL(q || m), TV, u).
void update_mixed(const float* d, const float* t, int64_t n, RowScalars& rs) {
    double jsd = 0, kl_qm = 0, tv = 0, u = 0;
    for (int64_t c = 0; c < n; ++c) {
        const double lq = double(d[c]) - rs.lse_d, lp = double(t[c]) - rs.lse_t;
        const double q = std::exp(lq), p = std::exp(lp);
        const double lqm = log_ratio_to_mean(lp - lq), lpm = log_ratio_to_mean(lq - lp);
        jsd += 0.5 * (p * lpm + q * lqm);
        kl_qm += q * lqm;
        tv += 0.5 * std::abs(p - q);
        if (q > p) u += q;
    }
    rs.jsd += jsd;
    rs.kl_qm += kl_qm;
    rs.tv += tv;
    rs.u += u;
}

// The mix's gradient with respect to one draft logit, before grad_scale * weight.
double mixed_gradient(double dv, double tv_logit, const RowScalars& rs,
                      const LmHeadDivergences& div) {
    const double lq = dv - rs.lse_d, lp = tv_logit - rs.lse_t;
    const double q = std::exp(lq), p = std::exp(lp);
    double g = 0.0;
    if (div.kl != 0.0f) g += double(div.kl) * (q - p);
    if (div.rkl != 0.0f) g += double(div.rkl) * q * (lq - lp - rs.rkl);
    if (div.jsd != 0.0f) g += double(div.jsd) * 0.5 * q * (log_ratio_to_mean(lp - lq) - rs.kl_qm);
    if (div.tv != 0.0f) g += double(div.tv) * q * ((q > p ? 1.0 : 0.0) - rs.u);
    return g;
}

}  // namespace

int64_t lm_head_kl_workspace(int64_t rows, int64_t vocab, int64_t chunk) {
    return 2 * rows * std::min(chunk, vocab);
}

void lm_head_kl(const Exec& ex, const Tensor& h, const Tensor& t, const Tensor& w,
                const Tensor& weights, float grad_scale, int64_t chunk,
                const LmHeadDivergences& div, const LmHeadKlOut& out) {
    check_inputs(h, t, w, weights, chunk, div, out);
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
    // One pass over the vocabulary: both sides' chunk logits, `row` on each row of the chunk,
    // then `after` on the whole chunk.
    const auto sweep = [&](const auto& row, const auto& after) {
        for (int64_t v0 = 0; v0 < v; v0 += step) {
            const int64_t n = std::min(step, v - v0);
            lm_chunk_logits(ex, h, w, v0, n, dl);
            lm_chunk_logits(ex, t, w, v0, n, tl);
            parallel_for(ex, r, r > 1, [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1; ++i) row(i, dl + i * n, tl + i * n, v0, n);
            });
            after(v0, n);
        }
    };
    const auto nothing = [](int64_t, int64_t) {};

    std::vector<RowStats> st(static_cast<size_t>(r));
    sweep([&](int64_t i, const float* d, const float* tt, int64_t v0,
              int64_t n) { update_row(d, tt, v0, n, st[i]); },
          nothing);
    std::vector<RowScalars> rs(static_cast<size_t>(r));
    for (int64_t i = 0; i < r; ++i) {
        RowScalars& x = rs[i];
        x.lse_d = st[i].d.value();
        x.lse_t = st[i].t.value();
        x.kl = st[i].cross_p / st[i].t.sum - x.lse_t + x.lse_d;
        x.rkl = st[i].cross_q / st[i].d.sum - x.lse_d + x.lse_t;
    }
    if (div.needs_mixed_pass()) {
        sweep([&](int64_t i, const float* d, const float* tt, int64_t,
                  int64_t n) { update_mixed(d, tt, n, rs[i]); },
              nothing);
    }
    if (!out.loss_rows.empty()) {
        for (int64_t i = 0; i < r; ++i) {
            const RowScalars& x = rs[i];
            const double loss = double(div.kl) * x.kl + double(div.rkl) * x.rkl +
                                double(div.jsd) * x.jsd + double(div.tv) * x.tv;
            out.loss_rows.f32()[i] = wt[i] == 0.0f ? 0.0f : static_cast<float>(loss);
        }
    }
    if (!out.argmax.empty()) {
        for (int64_t i = 0; i < r; ++i) out.argmax.i32()[i] = st[i].argmax;
    }
    if (out.dh.empty() && out.dw.empty()) return;

    // g (in place over the draft chunk) = grad_scale * weight * the mix's gradient, then the
    // chunk's two gradient products.
    sweep(
        [&](int64_t i, float* d, const float* tt, int64_t, int64_t n) {
            const double coef = double(grad_scale) * wt[i];
            for (int64_t c = 0; c < n; ++c) {
                d[c] = coef == 0.0
                           ? 0.0f
                           : static_cast<float>(coef * mixed_gradient(d[c], tt[c], rs[i], div));
            }
        },
        [&](int64_t v0, int64_t n) { lm_chunk_grads(ex, dl, h, w, v0, n, out.dh, out.dw); });
}

}  // namespace dflash::cpu

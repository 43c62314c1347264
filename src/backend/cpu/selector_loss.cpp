// DFlash2's selector loss family (docs/training.md "The selector's loss"; semantics on
// Backend::selector_inject, selector_ce, selector_stats and selector_unary_bwd): hard target
// injection into the unary top-K, the K-way cross-entropy of the edge scores and its gradients, the
// selector's metrics (recall, teacher-forced accuracy, self-conditioned path and top-K oracle
// runs), and the gradient the candidates' logits send to the hidden state. Tested by
// tests/ops/selector_loss_test.cpp (and as the oracle of tests/cuda/selector_loss_cuda_test.cpp).
#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {

void selector_inject(const Exec& ex, const Tensor& logits, const Tensor& labels,
                     const Tensor& values, const Tensor& ids, const Tensor& label_pos,
                     const Tensor& hit) {
    check_cpu_f32(logits, "selector_inject", "logits");
    const SelectorLossDims d =
        check_selector_inject_shapes(logits, labels, values, ids, label_pos, hit);
    const int64_t V = logits.dim(1), K = d.K;
    for (int64_t r = 0; r < d.R; ++r) {
        const int32_t t = labels.i32()[r];
        label_pos.i32()[r] = -1;
        hit.i32()[r] = 0;
        if (t < 0) continue;
        DF_CHECK(t < V, "selector_inject: label {} at row {} is outside the vocabulary [0, {})", t,
                 r, V);
        int32_t* row_ids = ids.i32() + r * K;
        for (int64_t k = 0; k < K && label_pos.i32()[r] < 0; ++k)
            if (row_ids[k] == t) label_pos.i32()[r] = static_cast<int32_t>(k), hit.i32()[r] = 1;
        if (hit.i32()[r]) continue;
        // The weakest candidate gives way; the target keeps its own unary value.
        row_ids[K - 1] = t;
        values.f32()[r * K + K - 1] = logits.f32()[r * V + t];
        label_pos.i32()[r] = static_cast<int32_t>(K - 1);
    }
    (void)ex;
}

void selector_ce(const Exec& ex, const SelectorCeArgs& a) {
    const SelectorLossDims d = check_selector_ce_shapes(a);
    for (const Tensor* t : {&a.values, &a.pair, &a.weights, &a.loss_rows})
        check_cpu_f32(*t, "selector_ce", "a row tensor");
    const bool grads = !a.grad_weights.empty();
    const int64_t K = d.K;
    parallel_for(ex, d.R, d.R * K > 16384, [&](int64_t r0, int64_t r1) {
        std::vector<float> s(K), du(K);
        for (int64_t r = r0; r < r1; ++r) {
            // Scores in f32 as at inference; the normaliser in double.
            int32_t best = 0;
            for (int64_t k = 0; k < K; ++k) {
                const float l = a.values.f32()[r * K + k] * a.multiplier;
                float u = l, dudl = a.multiplier;
                if (a.softcap > 0) {
                    const float th = std::tanh(l / a.softcap);
                    u = a.softcap * th;
                    dudl = a.multiplier * (1.0f - th * th);
                }
                s[k] = u + a.pair.f32()[r * K + k];
                du[k] = dudl;
                if (s[k] > s[best]) best = static_cast<int32_t>(k);
            }
            a.pick.i32()[r] = best;
            const int32_t lab = a.label_pos.i32()[r];
            const bool trained = a.weights.f32()[r] != 0.0f && lab >= 0 && lab < K;
            double z = 0;
            for (int64_t k = 0; k < K; ++k) z += std::exp(static_cast<double>(s[k] - s[best]));
            const double lse = static_cast<double>(s[best]) + std::log(z);
            a.loss_rows.f32()[r] = trained ? static_cast<float>(lse - s[lab]) : 0.0f;
            if (!grads) continue;
            const float gw = trained ? a.grad_weights.f32()[r] : 0.0f;
            for (int64_t k = 0; k < K; ++k) {
                const double p = std::exp(static_cast<double>(s[k]) - lse);
                const float g = gw * static_cast<float>(p - (k == lab ? 1.0 : 0.0));
                a.dpair.f32()[r * K + k] = g;
                a.dvalues.f32()[r * K + k] = g * du[k];
            }
        }
    });
}

void selector_stats(const Exec& ex, const Tensor& loss_rows, const Tensor& pick,
                    const Tensor& label_pos, const Tensor& hit, const Tensor& weights,
                    int64_t block, const Tensor& stats) {
    check_cpu_f32(stats, "selector_stats", "stats");
    const int64_t R =
        check_selector_stats_shapes(loss_rows, pick, label_pos, hit, weights, block, stats);
    const SelectorStatsLayout lay{block};
    const float* w = weights.f32();
    float* st = stats.f32();
    double loss_sum = 0;
    // The row's target was the path's pick: then the path's predecessor at the next row is the
    // target, i.e. the teacher-forced one, so its teacher-forced scores are the path's.
    auto on_path = [&](int64_t i) { return hit.i32()[i] && pick.i32()[i] == label_pos.i32()[i]; };
    for (int64_t i = 0; i < R; ++i) {
        if (w[i] == 0.0f) continue;
        loss_sum += static_cast<double>(w[i]) * loss_rows.f32()[i];
        st[SelectorStatsLayout::kRows] += 1.0f;
        st[SelectorStatsLayout::kHits] += static_cast<float>(hit.i32()[i] != 0);
        st[SelectorStatsLayout::kPicks] += static_cast<float>(pick.i32()[i] == label_pos.i32()[i]);
    }
    for (int64_t b0 = 0; b0 < R; b0 += block) {
        if (w[b0 + 1] == 0.0f) continue;
        st[SelectorStatsLayout::kBlocks] += 1.0f;
        for (int64_t k = 1; k < block && w[b0 + k] != 0.0f; ++k) {
            st[lay.path_count(k)] += 1.0f;
            if (!on_path(b0 + k)) break;
            st[lay.path_correct(k)] += 1.0f;
            st[SelectorStatsLayout::kPathRun] += 1.0f;
        }
        for (int64_t k = 1; k < block && w[b0 + k] != 0.0f && hit.i32()[b0 + k]; ++k)
            st[SelectorStatsLayout::kOracleRun] += 1.0f;
    }
    st[SelectorStatsLayout::kLossSum] += static_cast<float>(loss_sum);
    (void)ex;
}

void selector_unary_bwd(const Exec& ex, const Tensor& dvalues, const Tensor& ids, const Tensor& w,
                        const Tensor& out) {
    check_cpu_f32(w, "selector_unary_bwd", "w");
    check_cpu_f32(out, "selector_unary_bwd", "out");
    const SelectorLossDims d = check_selector_unary_bwd_shapes(dvalues, ids, w, out);
    const int64_t V = w.dim(0), D = w.dim(1);
    for (int64_t i = 0; i < d.R * d.K; ++i)
        DF_CHECK(ids.i32()[i] >= 0 && ids.i32()[i] < V,
                 "selector_unary_bwd: id {} at entry {} is outside the vocabulary [0, {})",
                 ids.i32()[i], i, V);
    parallel_for(ex, d.R, d.R * d.K * D > 65536, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float* o = out.f32() + r * D;
            for (int64_t c = 0; c < D; ++c) o[c] = 0.0f;
            for (int64_t k = 0; k < d.K; ++k) {
                const int32_t id = ids.i32()[r * d.K + k];
                const float g = dvalues.f32()[r * d.K + k];
                const float* wr = w.f32() + id * D;
                for (int64_t c = 0; c < D; ++c) o[c] += g * wr[c];
            }
        }
    });
}

}  // namespace dflash::cpu

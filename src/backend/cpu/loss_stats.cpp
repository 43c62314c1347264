// Loss and accuracy sums of one micro-batch, accumulated into a stats vector on the device (the
// step downloads it once), and the row-wise argmax that greedy decoding reads.
// Tested by tests/ops/loss_stats_test.cpp (and as the oracle of
// tests/cuda/loss_stats_cuda_test.cpp).
#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {

void loss_stats(const Exec&, const Tensor& loss_rows, const Tensor& argmax, const Tensor& labels,
                const Tensor& weights, int64_t period, const Tensor& stats) {
    check_cpu_f32(loss_rows, "loss_stats", "loss_rows");
    check_cpu_f32(weights, "loss_stats", "weights");
    check_cpu_f32(stats, "loss_stats", "stats");
    const int64_t r = check_loss_stats_shapes(loss_rows, argmax, labels, weights, period, stats);
    const LossStatsLayout lay{period};
    const float* loss = loss_rows.f32();
    const float* w = weights.f32();
    const int32_t* am = argmax.i32();
    const int32_t* lab = labels.i32();
    double loss_sum = 0, weight_sum = 0;
    float* st = stats.f32();
    for (int64_t i = 0; i < r; ++i) {
        if (w[i] == 0.0f) continue;
        loss_sum += static_cast<double>(w[i]) * loss[i];
        weight_sum += w[i];
        const int64_t k = i % period;
        st[lay.count(k)] += 1.0f;
        if (am[i] == lab[i]) st[lay.correct(k)] += 1.0f;
    }
    st[LossStatsLayout::kLossSum] += static_cast<float>(loss_sum);
    st[LossStatsLayout::kWeightSum] += static_cast<float>(weight_sum);
}

void argmax_rows(const Exec& ex, const Tensor& x, const Tensor& out) {
    check_cpu_f32(x, "argmax_rows", "x");
    check_argmax_rows_shapes(x, out);
    const int64_t rows = x.dim(0), v = x.dim(1);
    parallel_for(ex, rows, rows > 4, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            const float* row = x.f32() + i * v;
            int64_t best = 0;
            for (int64_t c = 1; c < v; ++c)
                if (row[c] > row[best]) best = c;
            out.i32()[i] = static_cast<int32_t>(best);
        }
    });
}

}  // namespace dflash::cpu

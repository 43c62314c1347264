// cuda::loss_stats and cuda::argmax_rows: checks and dispatch (semantics: Backend::loss_stats and
// Backend::argmax_rows in backend/op_list.h; the CPU reference is backend/cpu/loss_stats.cpp).
// Tested by tests/cuda/loss_stats_cuda_test.cpp.
#include "backend/cuda/kernels/loss_stats.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/row_stats.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"
#include "core/error.h"

namespace dflash::cuda {

void loss_stats(const Exec& ex, const Tensor& loss_rows, const Tensor& argmax, const Tensor& labels,
                const Tensor& weights, int64_t period, const Tensor& stats) {
    for (const auto& [t, name] : {std::pair{&loss_rows, "loss_rows"}, std::pair{&argmax, "argmax"},
                                  std::pair{&labels, "labels"}, std::pair{&weights, "weights"},
                                  std::pair{&stats, "stats"}}) {
        check_device(ex, *t, "loss_stats", name);
    }
    DF_CHECK(period >= 1 && period <= kLossStatsMaxPeriod,
             "loss_stats: period {} is outside [1, {}]", period, kLossStatsMaxPeriod);
    const int64_t r = check_loss_stats_shapes(loss_rows, argmax, labels, weights, period, stats);
    if (r == 0) return;
    loss_stats_rows(loss_rows.f32(), argmax.i32(), labels.i32(), weights.f32(), r, period,
                    stats.f32(), ex.stream);
}

void argmax_rows(const Exec& ex, const Tensor& x, const Tensor& out) {
    check_device(ex, x, "argmax_rows", "x");
    check_device(ex, out, "argmax_rows", "out");
    DF_CHECK(x.dtype() == DType::f32, "argmax_rows: x is {}, expected f32", x.describe());
    check_argmax_rows_shapes(x, out);
    const int64_t rows = x.dim(0), v = x.dim(1);
    DF_CHECK(v >= 1 && v <= INT32_MAX, "argmax_rows: x {} has no columns or too many for i32",
             x.describe());
    if (rows == 0) return;
    const ArgmaxSplit s = argmax_split(rows, v, ex.sm_count, kArgmaxThreads);
    float* part_val = nullptr;
    int32_t* part_idx = nullptr;
    if (s.splits > 1) {
        const size_t n = static_cast<size_t>(rows * s.splits);
        part_val = ex.scratch->take_n<float>(n, "argmax_rows partial maxima");
        part_idx = ex.scratch->take_n<int32_t>(n, "argmax_rows partial indices");
    }
    argmax_rows_launch(x.f32(), rows, v, s.span, s.splits, part_val, part_idx, out.i32(),
                       ex.stream);
}

}  // namespace dflash::cuda

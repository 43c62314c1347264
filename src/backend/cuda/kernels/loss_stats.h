// Raw launchers of loss_stats and argmax_rows (no fmt: Note [No fmt in .cu files]). Tested by
// tests/cuda/loss_stats_cuda_test.cpp; the argmax split by tests/ops/row_stats_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda {

// stats f32 [2 + 2P] += the weighted loss sum, weight sum and per-position correct/count sums of
// `rows` rows (see Backend::loss_stats). One block: deterministic. period <= kLossStatsMaxPeriod.
constexpr int64_t kLossStatsMaxPeriod = 4096;
void loss_stats_rows(const float* loss_rows, const int32_t* argmax, const int32_t* labels,
                     const float* weights, int64_t rows, int64_t period, float* stats,
                     CUstream_st* stream);

// Threads per block of argmax_rows' first stage (the unit of argmax_split in row_stats.h).
constexpr int kArgmaxThreads = 256;
// out i32 [R] = lowest index of each row's max of x f32 [R, V]. With splits > 1, stage 1 writes
// `splits` partials per row into part_val / part_idx ([R, splits], scratch) and stage 2 reduces
// them in order; with splits == 1 one kernel writes out directly (the partials are unused).
void argmax_rows_launch(const float* x, int64_t rows, int64_t vocab, int64_t span, int64_t splits,
                        float* part_val, int32_t* part_idx, int32_t* out, CUstream_st* stream);

}  // namespace dflash::cuda

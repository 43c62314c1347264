// loss_stats (one block: per-thread partial sums in double reduced by a fixed tree, integer
// shared-memory counters for the per-position accuracy counts) and argmax_rows (two-stage: row
// splits, then an in-order reduction of their partials; lowest index on ties). No floating-point
// atomics. Tested by tests/cuda/loss_stats_cuda_test.cpp.
#include "backend/cuda/kernels/loss_stats.h"

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/block_reduce.cuh"
#include "backend/cuda/kernels/row_stats.h"

namespace dflash::cuda {
namespace {

constexpr int kStatsThreads = 512;

__global__ void __launch_bounds__(kStatsThreads)
    loss_stats_kernel(const float* loss, const int32_t* argmax, const int32_t* labels,
                      const float* weights, int64_t rows, int64_t period, float* stats) {
    extern __shared__ int32_t counts[];  // [2P]: correct[k], then count[k]
    __shared__ BlockScratch<kStatsThreads> sh;
    for (int64_t k = threadIdx.x; k < 2 * period; k += kStatsThreads) counts[k] = 0;
    __syncthreads();
    double loss_sum = 0.0, weight_sum = 0.0;
    for (int64_t i = threadIdx.x; i < rows; i += kStatsThreads) {
        const float w = weights[i];
        if (w == 0.0f) continue;
        loss_sum += static_cast<double>(w) * loss[i];
        weight_sum += w;
        const int64_t k = i % period;
        atomicAdd(&counts[period + k], 1);  // integers: the order does not change the sum
        if (argmax[i] == labels[i]) atomicAdd(&counts[k], 1);
    }
    loss_sum = block_sum<kStatsThreads>(loss_sum, sh);
    weight_sum = block_sum<kStatsThreads>(weight_sum, sh);  // its barriers order the counters too
    for (int64_t k = threadIdx.x; k < period; k += kStatsThreads) {
        stats[2 + k] += static_cast<float>(counts[k]);
        stats[2 + period + k] += static_cast<float>(counts[period + k]);
    }
    if (threadIdx.x == 0) {
        stats[0] += static_cast<float>(loss_sum);
        stats[1] += static_cast<float>(weight_sum);
    }
}

// Block b handles row b / splits, columns [s * span, min((s + 1) * span, V)) with s = b % splits.
__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_stage1_kernel(const float* x, int64_t vocab, int64_t span, int64_t splits, bool vec,
                         float* part_val, int32_t* part_idx, int32_t* out) {
    __shared__ BlockScratch<kArgmaxThreads> sh;
    const int64_t r = blockIdx.x / splits, s = blockIdx.x % splits;
    const float* row = x + r * vocab;
    const int64_t begin = s * span, end = begin + span < vocab ? begin + span : vocab;
    float best = -INFINITY;
    int32_t best_i = INT32_MAX;
    const auto consider = [&](float v, int64_t c) {
        if (argmax_better(v, static_cast<int32_t>(c), best, best_i))
            best = v, best_i = static_cast<int32_t>(c);
    };
    if (vec) {  // begin and end are multiples of 4 (span is; vocab is when vec)
        for (int64_t c = begin + 4 * threadIdx.x; c < end; c += 4 * kArgmaxThreads) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(row + c));
            consider(v.x, c), consider(v.y, c + 1), consider(v.z, c + 2), consider(v.w, c + 3);
        }
    } else {
        for (int64_t c = begin + threadIdx.x; c < end; c += kArgmaxThreads)
            consider(__ldg(row + c), c);
    }
    block_argmax<kArgmaxThreads>(best, best_i, sh);
    if (threadIdx.x != 0) return;
    if (splits == 1) {
        out[r] = best_i == INT32_MAX ? 0 : best_i;  // an all-NaN row: 0, as the CPU reference
    } else {
        part_val[blockIdx.x] = best;
        part_idx[blockIdx.x] = best_i;
    }
}

// One warp per row over its `splits` partials.
__global__ void argmax_stage2_kernel(const float* part_val, const int32_t* part_idx, int64_t splits,
                                     int32_t* out) {
    const int64_t r = blockIdx.x;
    float best = -INFINITY;
    int32_t best_i = INT32_MAX;
    for (int64_t s = threadIdx.x; s < splits; s += 32) {
        const float v = part_val[r * splits + s];
        const int32_t i = part_idx[r * splits + s];
        if (argmax_better(v, i, best, best_i)) best = v, best_i = i;
    }
    warp_argmax(best, best_i);
    if (threadIdx.x == 0) out[r] = best_i == INT32_MAX ? 0 : best_i;
}

}  // namespace

void loss_stats_rows(const float* loss_rows, const int32_t* argmax, const int32_t* labels,
                     const float* weights, int64_t rows, int64_t period, float* stats,
                     CUstream_st* stream) {
    const size_t smem = static_cast<size_t>(2 * period) * sizeof(int32_t);
    loss_stats_kernel<<<1, kStatsThreads, smem, stream>>>(loss_rows, argmax, labels, weights, rows,
                                                          period, stats);
    DF_CUDA_CHECK_LAUNCH(loss_stats_kernel);
}

void argmax_rows_launch(const float* x, int64_t rows, int64_t vocab, int64_t span, int64_t splits,
                        float* part_val, int32_t* part_idx, int32_t* out, CUstream_st* stream) {
    if (rows <= 0) return;
    const bool vec = vocab % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
    const int64_t blocks = rows * splits;
    argmax_stage1_kernel<<<static_cast<unsigned>(blocks), kArgmaxThreads, 0, stream>>>(
        x, vocab, span, splits, vec, part_val, part_idx, out);
    DF_CUDA_CHECK_LAUNCH(argmax_stage1_kernel);
    if (splits == 1) return;
    argmax_stage2_kernel<<<static_cast<unsigned>(rows), 32, 0, stream>>>(part_val, part_idx, splits,
                                                                         out);
    DF_CUDA_CHECK_LAUNCH(argmax_stage2_kernel);
}

}  // namespace dflash::cuda

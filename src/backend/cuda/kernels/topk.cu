// Top-K of each row: one block per row and K rounds; round k finds, with the deterministic block
// argmax of block_reduce.cuh, the best element ranked after the one round k-1 found in the strict
// order (value descending, index ascending). No state but the previous winner, so ties and the
// thread split cannot change the answer. Costs K passes over the row: fine for the selector's
// K = 16 over a vocabulary at decode time, where the rows are few. A NaN is never picked (as in
// argmax_rows); a row with fewer than K non-NaN values gets index 0 for the rest.
// Tested by tests/cuda/topk_cuda_test.cpp.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/block_reduce.cuh"
#include "backend/cuda/kernels/topk.h"

namespace dflash::cuda::kernels {
namespace {

constexpr int kTopkThreads = 256;

__global__ void __launch_bounds__(kTopkThreads)
    topk_kernel(const float* __restrict__ x, int64_t vocab, int64_t k, float* __restrict__ values,
                int32_t* __restrict__ indices) {
    __shared__ BlockScratch<kTopkThreads> sh;
    const int64_t r = blockIdx.x;
    const float* row = x + r * vocab;
    float prev_v = INFINITY;
    int32_t prev_i = -1;  // round 0: everything ranks after this
    for (int64_t round = 0; round < k; ++round) {
        float best = -INFINITY;
        int32_t best_i = INT32_MAX;
        for (int64_t c = threadIdx.x; c < vocab; c += kTopkThreads) {
            const float v = __ldg(row + c);
            const auto i = static_cast<int32_t>(c);
            const bool after = v < prev_v || (v == prev_v && i > prev_i);
            if (after && argmax_better(v, i, best, best_i)) best = v, best_i = i;
        }
        block_argmax<kTopkThreads>(best, best_i, sh);
        if (threadIdx.x == 0) {
            values[r * k + round] = best;
            indices[r * k + round] = best_i == INT32_MAX ? 0 : best_i;
        }
        prev_v = best;
        prev_i = best_i;
    }
}

}  // namespace

void topk_rows(const float* x, int64_t rows, int64_t vocab, int64_t k, float* values,
               int32_t* indices, CUstream_st* stream) {
    if (rows <= 0) return;
    topk_kernel<<<static_cast<unsigned>(rows), kTopkThreads, 0, stream>>>(x, vocab, k, values,
                                                                          indices);
    DF_CUDA_CHECK_LAUNCH(topk_kernel);
}

}  // namespace dflash::cuda::kernels

// Deterministic block-wide reductions for the row kernels of lm_head_ce.cu and loss_stats.cu:
// a fixed butterfly within each warp, then warp 0 over the per-warp results, so the same inputs
// give the same bits on every run (no atomics). Every thread of the block must call them; each
// returns the result to all threads. Tested through tests/cuda/lm_head_ce_cuda_test.cpp and
// tests/cuda/loss_stats_cuda_test.cpp.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/row_stats.h"

namespace dflash::cuda {

constexpr unsigned kFullMask = 0xffffffffu;

template <class T>
__device__ __forceinline__ T warp_sum(T v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kFullMask, v, off);
    return v;
}

__device__ __forceinline__ void warp_argmax(float& v, int32_t& i) {
    for (int off = 16; off > 0; off /= 2) {
        const float ov = __shfl_xor_sync(kFullMask, v, off);
        const int32_t oi = __shfl_xor_sync(kFullMask, i, off);
        if (argmax_better(ov, oi, v, i)) v = ov, i = oi;
    }
}

// Shared scratch for kThreads / 32 partials of the widest type used (double).
template <int kThreads>
struct BlockScratch {
    static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps, one block");
    double d[kThreads / 32];
    float f[kThreads / 32];
    int32_t i[kThreads / 32];
};

template <int kThreads, class T>
__device__ T block_sum(T v, BlockScratch<kThreads>& sh) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    v = warp_sum(v);
    __syncthreads();  // the scratch may still be read by a previous reduction
    T* part = nullptr;
    if constexpr (sizeof(T) == 8) {
        part = sh.d;
    } else {
        part = sh.f;
    }
    if (lane == 0) part[warp] = v;
    __syncthreads();
    if (warp == 0) {
        T x = lane < kWarps ? part[lane] : T(0);
        x = warp_sum(x);
        if (lane == 0) part[0] = x;
    }
    __syncthreads();
    return part[0];
}

// The block's (max, lowest index of the max) over every thread's (v, i).
template <int kThreads>
__device__ void block_argmax(float& v, int32_t& i, BlockScratch<kThreads>& sh) {
    constexpr int kWarps = kThreads / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    warp_argmax(v, i);
    __syncthreads();
    if (lane == 0) sh.f[warp] = v, sh.i[warp] = i;
    __syncthreads();
    if (warp == 0) {
        float x = lane < kWarps ? sh.f[lane] : -INFINITY;
        int32_t j = lane < kWarps ? sh.i[lane] : INT32_MAX;
        warp_argmax(x, j);
        if (lane == 0) sh.f[0] = x, sh.i[0] = j;
    }
    __syncthreads();
    v = sh.f[0];
    i = sh.i[0];
}

}  // namespace dflash::cuda

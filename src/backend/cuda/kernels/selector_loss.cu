// DFlash2's selector loss family. selector_inject and selector_ce: one thread per row (K is a few
// dozen at most). selector_stats: one block, one thread per block of rows walking its path, double
// partial sums reduced by a fixed tree and integer shared-memory counters (no floating-point
// atomics). selector_unary_bwd: one thread block per row, threads over D, candidates summed in
// order. Tested by tests/cuda/selector_loss_cuda_test.cpp.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/block_reduce.cuh"
#include "backend/cuda/kernels/grid_stride.cuh"
#include "backend/cuda/kernels/selector_loss.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

__global__ void inject_kernel(const float* __restrict__ logits, const int32_t* __restrict__ labels,
                              float* __restrict__ values, int32_t* __restrict__ ids,
                              int32_t* __restrict__ label_pos, int32_t* __restrict__ hit, int64_t R,
                              int64_t V, int64_t K) {
    for_each_index(R, [&](int64_t r) {
        const int32_t t = labels[r];
        int32_t pos = -1, found = 0;
        if (t >= 0 && t < V) {
            for (int64_t k = 0; k < K; ++k)
                if (ids[r * K + k] == t) {
                    pos = static_cast<int32_t>(k), found = 1;
                    break;
                }
            if (!found) {
                ids[r * K + K - 1] = t;
                values[r * K + K - 1] = logits[r * V + t];
                pos = static_cast<int32_t>(K - 1);
            }
        }
        label_pos[r] = pos;
        hit[r] = found;
    });
}

__device__ __forceinline__ float unary(float v, float m, float cap, float* dudl) {
    const float l = __fmul_rn(v, m);
    if (cap > 0.0f) {
        const float th = tanhf(l / cap);
        *dudl = m * (1.0f - th * th);
        return cap * th;
    }
    *dudl = m;
    return l;
}

__global__ void ce_kernel(SelectorCeLaunch a) {
    for_each_index(a.R, [&](int64_t r) {
        const int64_t K = a.K;
        float best = -INFINITY, du = 0.0f;
        int32_t best_k = 0;
        for (int64_t k = 0; k < K; ++k) {
            const float s = __fadd_rn(unary(a.values[r * K + k], a.multiplier, a.softcap, &du),
                                      a.pair[r * K + k]);
            if (k == 0 || s > best) best = s, best_k = static_cast<int32_t>(k);
        }
        a.pick[r] = best_k;
        const int32_t lab = a.label_pos[r];
        const bool trained = a.weights[r] != 0.0f && lab >= 0 && lab < K;
        double z = 0.0;
        float s_lab = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            const float s = __fadd_rn(unary(a.values[r * K + k], a.multiplier, a.softcap, &du),
                                      a.pair[r * K + k]);
            z += exp(static_cast<double>(s - best));
            if (k == lab) s_lab = s;
        }
        const double lse = static_cast<double>(best) + log(z);
        a.loss_rows[r] = trained ? static_cast<float>(lse - s_lab) : 0.0f;
        if (a.grad_weights == nullptr) return;
        const float gw = trained ? a.grad_weights[r] : 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            const float s = __fadd_rn(unary(a.values[r * K + k], a.multiplier, a.softcap, &du),
                                      a.pair[r * K + k]);
            const double p = exp(static_cast<double>(s) - lse);
            const float g = gw * static_cast<float>(p - (k == lab ? 1.0 : 0.0));
            a.dpair[r * K + k] = g;
            a.dvalues[r * K + k] = g * du;
        }
    });
}

constexpr int kStatsThreads = 256;
// The counters of SelectorStatsLayout that are not per-position: rows, hits, picks, blocks, path
// and oracle runs.
constexpr int kScalarCounts = 6;

__global__ void __launch_bounds__(kStatsThreads)
    stats_kernel(const float* loss, const int32_t* pick, const int32_t* label_pos,
                 const int32_t* hit, const float* w, int64_t R, int64_t block, float* stats) {
    extern __shared__ int32_t counts[];  // [6 + 2 * block]: as SelectorStatsLayout from index 1
    __shared__ BlockScratch<kStatsThreads> sh;
    for (int64_t k = threadIdx.x; k < kScalarCounts + 2 * block; k += kStatsThreads) counts[k] = 0;
    __syncthreads();
    double loss_sum = 0.0;
    for (int64_t i = threadIdx.x; i < R; i += kStatsThreads) {
        if (w[i] == 0.0f) continue;
        loss_sum += static_cast<double>(w[i]) * loss[i];
        atomicAdd(&counts[0], 1);  // integers: the order does not change the sum
        if (hit[i]) atomicAdd(&counts[1], 1);
        if (pick[i] == label_pos[i]) atomicAdd(&counts[2], 1);
    }
    for (int64_t b0 = threadIdx.x * block; b0 < R; b0 += int64_t{kStatsThreads} * block) {
        if (w[b0 + 1] == 0.0f) continue;
        atomicAdd(&counts[3], 1);
        int32_t run = 0;
        for (int64_t k = 1; k < block && w[b0 + k] != 0.0f; ++k) {
            atomicAdd(&counts[kScalarCounts + k], 1);
            if (!(hit[b0 + k] && pick[b0 + k] == label_pos[b0 + k])) break;
            atomicAdd(&counts[kScalarCounts + block + k], 1);
            ++run;
        }
        atomicAdd(&counts[4], run);
        int32_t oracle = 0;
        for (int64_t k = 1; k < block && w[b0 + k] != 0.0f && hit[b0 + k]; ++k) ++oracle;
        atomicAdd(&counts[5], oracle);
    }
    loss_sum = block_sum<kStatsThreads>(loss_sum, sh);  // its barriers order the counters too
    for (int64_t k = threadIdx.x; k < kScalarCounts + 2 * block; k += kStatsThreads)
        stats[1 + k] += static_cast<float>(counts[k]);
    if (threadIdx.x == 0) stats[0] += static_cast<float>(loss_sum);
}

__global__ void unary_bwd_kernel(const float* __restrict__ dv, const int32_t* __restrict__ ids,
                                 const uint16_t* __restrict__ w, float* __restrict__ out, int64_t K,
                                 int64_t V, int64_t D) {
    const int64_t r = blockIdx.x;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) {
        float acc = 0.0f;
        for (int64_t k = 0; k < K; ++k) {
            const int32_t id = ids[r * K + k];
            if (id < 0 || id >= V) continue;
            acc = __fadd_rn(acc, __fmul_rn(dv[r * K + k], bf16_bits_to_f32(w[id * D + c])));
        }
        out[r * D + c] = acc;
    }
}

}  // namespace

void selector_inject(const float* logits, const int32_t* labels, float* values, int32_t* ids,
                     int32_t* label_pos, int32_t* hit, int64_t R, int64_t V, int64_t K,
                     CUstream_st* stream) {
    if (R <= 0) return;
    inject_kernel<<<grid_blocks(R), kThreads, 0, stream>>>(logits, labels, values, ids, label_pos,
                                                           hit, R, V, K);
    DF_CUDA_CHECK_LAUNCH(inject_kernel);
}

void selector_ce(const SelectorCeLaunch& a, CUstream_st* stream) {
    if (a.R <= 0) return;
    ce_kernel<<<grid_blocks(a.R), kThreads, 0, stream>>>(a);
    DF_CUDA_CHECK_LAUNCH(ce_kernel);
}

void selector_stats(const float* loss_rows, const int32_t* pick, const int32_t* label_pos,
                    const int32_t* hit, const float* weights, int64_t R, int64_t block,
                    float* stats, CUstream_st* stream) {
    if (R <= 0) return;
    const size_t smem = static_cast<size_t>(kScalarCounts + 2 * block) * sizeof(int32_t);
    stats_kernel<<<1, kStatsThreads, smem, stream>>>(loss_rows, pick, label_pos, hit, weights, R,
                                                     block, stats);
    DF_CUDA_CHECK_LAUNCH(stats_kernel);
}

void selector_unary_bwd(const float* dvalues, const int32_t* ids, const uint16_t* w, float* out,
                        int64_t R, int64_t K, int64_t V, int64_t D, CUstream_st* stream) {
    if (R <= 0 || D <= 0) return;
    const int threads = D >= 256 ? 256 : static_cast<int>((D + 31) / 32 * 32);
    unary_bwd_kernel<<<static_cast<unsigned>(R), threads, 0, stream>>>(dvalues, ids, w, out, K, V,
                                                                       D);
    DF_CUDA_CHECK_LAUNCH(unary_bwd_kernel);
}

}  // namespace dflash::cuda::kernels

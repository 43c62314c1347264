// DFlash2 selector pair scores. Forward: one warp per (slot, predecessor, candidate), lanes over
// the rank, a fixed butterfly sum (deterministic). Backward: dz one thread per (slot, rank
// column); the codebook gradients one thread per rank column walking every (slot, predecessor,
// candidate) in order, so rows named by several ids accumulate deterministically without
// atomics (slow for big training batches, but exact and simple: decoding needs only the forward).
// Tested by tests/cuda/selector_scores_cuda_test.cpp.
#include <cmath>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/grid_stride.cuh"
#include "backend/cuda/kernels/selector_scores.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

constexpr unsigned kMask = 0xffffffffu;

__device__ __forceinline__ float ld(const uint16_t* p, int64_t i) {
    return bf16_bits_to_f32(p[i]);
}

__device__ __forceinline__ bool valid(int32_t id, int64_t V) {
    return id >= 0 && id < V;
}

__global__ void selector_fwd_kernel(const uint16_t* __restrict__ z,
                                    const int32_t* __restrict__ pred,
                                    const int32_t* __restrict__ cand,
                                    const uint16_t* __restrict__ a, const uint16_t* __restrict__ bc,
                                    float* __restrict__ out, SelectorShape s) {
    const int64_t warps = int64_t{gridDim.x} * (blockDim.x / 32);
    const int lane = threadIdx.x % 32;
    const int64_t n = s.P * s.Kp * s.K;
    for (int64_t e = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32; e < n; e += warps) {
        const int64_t p = e / (s.Kp * s.K), i = (e / s.K) % s.Kp, j = e % s.K;
        const int32_t ai = pred[p * s.Kp + i], bi = cand[p * s.K + j];
        if (!valid(ai, s.V) || !valid(bi, s.V)) {
            if (lane == 0) out[e] = NAN;
            continue;
        }
        float acc = 0.0f;
        for (int64_t q = lane; q < s.r; q += 32)
            acc = __fadd_rn(acc, __fmul_rn(__fmul_rn(ld(a, ai * s.r + q), ld(z, p * s.r + q)),
                                           ld(bc, bi * s.r + q)));
        for (int off = 16; off > 0; off /= 2) acc += __shfl_xor_sync(kMask, acc, off);
        if (lane == 0) out[e] = acc;
    }
}

// dz[p, q] = sum_i A[pred i, q] * sum_j dS[p, i, j] Bc[cand j, q]
__global__ void selector_dz_kernel(const float* __restrict__ g, const int32_t* __restrict__ pred,
                                   const int32_t* __restrict__ cand, const uint16_t* __restrict__ a,
                                   const uint16_t* __restrict__ bc, uint16_t* __restrict__ dz,
                                   SelectorShape s) {
    const int64_t n = s.P * s.r;
    for_each_index(n, [&](int64_t e) {
        const int64_t p = e / s.r, q = e % s.r;
        float dzq = 0.0f;
        for (int64_t i = 0; i < s.Kp; ++i) {
            const int32_t ai = pred[p * s.Kp + i];
            if (!valid(ai, s.V)) continue;
            float sum_b = 0.0f;
            for (int64_t j = 0; j < s.K; ++j) {
                const int32_t bi = cand[p * s.K + j];
                if (!valid(bi, s.V)) continue;
                sum_b =
                    __fadd_rn(sum_b, __fmul_rn(g[(p * s.Kp + i) * s.K + j], ld(bc, bi * s.r + q)));
            }
            dzq = __fadd_rn(dzq, __fmul_rn(sum_b, ld(a, ai * s.r + q)));
        }
        dz[e] = static_cast<uint16_t>(f32_to_bf16_bits(dzq));
    });
}

// dA[pred, q] += (sum_j dS Bc[cand j, q]) z[p, q]; dBc[cand j, q] += dS z[p, q] A[pred, q]; one
// thread per rank column q, every (p, i, j) in order.
__global__ void selector_dcodebooks_kernel(const float* __restrict__ g,
                                           const uint16_t* __restrict__ z,
                                           const int32_t* __restrict__ pred,
                                           const int32_t* __restrict__ cand,
                                           const uint16_t* __restrict__ a,
                                           const uint16_t* __restrict__ bc, float* __restrict__ da,
                                           float* __restrict__ dbc, SelectorShape s) {
    for_each_index(s.r, [&](int64_t q) {
        for (int64_t p = 0; p < s.P; ++p) {
            const float zq = ld(z, p * s.r + q);
            for (int64_t i = 0; i < s.Kp; ++i) {
                const int32_t ai = pred[p * s.Kp + i];
                if (!valid(ai, s.V)) continue;
                const float aq = ld(a, ai * s.r + q);
                float sum_b = 0.0f;
                for (int64_t j = 0; j < s.K; ++j) {
                    const int32_t bi = cand[p * s.K + j];
                    if (!valid(bi, s.V)) continue;
                    const float gs = g[(p * s.Kp + i) * s.K + j];
                    sum_b = __fadd_rn(sum_b, __fmul_rn(gs, ld(bc, bi * s.r + q)));
                    float* db = dbc + bi * s.r + q;
                    *db = __fadd_rn(*db, __fmul_rn(__fmul_rn(gs, zq), aq));
                }
                float* d = da + ai * s.r + q;
                *d = __fadd_rn(*d, __fmul_rn(sum_b, zq));
            }
        }
    });
}

}  // namespace

void selector_scores_fwd(const uint16_t* z, const int32_t* pred, const int32_t* cand,
                         const uint16_t* a, const uint16_t* bc, float* out, const SelectorShape& s,
                         CUstream_st* stream) {
    const int64_t n = s.P * s.Kp * s.K;
    if (n <= 0) return;
    constexpr int kWarpsPerBlock = kThreads / 32;
    selector_fwd_kernel<<<grid_blocks(n, kWarpsPerBlock), kThreads, 0, stream>>>(z, pred, cand, a,
                                                                                 bc, out, s);
    DF_CUDA_CHECK_LAUNCH(selector_fwd_kernel);
}

void selector_scores_bwd(const float* dscores, const uint16_t* z, const int32_t* pred,
                         const int32_t* cand, const uint16_t* a, const uint16_t* bc, uint16_t* dz,
                         float* da, float* dbc, const SelectorShape& s, CUstream_st* stream) {
    if (s.P * s.r <= 0) return;
    selector_dz_kernel<<<grid_blocks(s.P * s.r), kThreads, 0, stream>>>(dscores, pred, cand, a, bc,
                                                                        dz, s);
    DF_CUDA_CHECK_LAUNCH(selector_dz_kernel);
    // 64 threads a block: r is a few hundred, so this spreads the columns over several SMs.
    selector_dcodebooks_kernel<<<grid_blocks(s.r, 64), 64, 0, stream>>>(dscores, z, pred, cand, a,
                                                                        bc, da, dbc, s);
    DF_CUDA_CHECK_LAUNCH(selector_dcodebooks_kernel);
}

}  // namespace dflash::cuda::kernels

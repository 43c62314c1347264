// DFlash2's grouped dynamic causal convolution: one thread per output element, taps summed in
// the CPU reference's order (t = 0, 1, ...) in fp32. The backward's parameter gradients are
// plain loops in a fixed order per output element (dbase: over rows; ddelta: over a group's
// channels), so they are deterministic without atomics. Tested by
// tests/cuda/dyn_conv_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/dyn_conv.h"
#include "backend/cuda/kernels/grid_stride.cuh"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

__device__ __forceinline__ float ld(const uint16_t* p, int64_t i) {
    return bf16_bits_to_f32(p[i]);
}

// Taps output row r may use: t <= its in-block position (never across a block start).
__device__ __forceinline__ int64_t taps(const DynConvShape& s, int64_t r) {
    const int64_t pos = r % s.bs;
    return pos + 1 < s.k ? pos + 1 : s.k;
}

// base[half, t, c] + delta[r, (half*k + t)*G + c/S]
__device__ __forceinline__ float coef(const DynConvShape& s, const uint16_t* base,
                                      const uint16_t* delta, int64_t r, int64_t t, int64_t c) {
    return __fadd_rn(ld(base, (s.half * s.k + t) * s.D + c),
                     ld(delta, r * 2 * s.k * s.G + (s.half * s.k + t) * s.G + c / s.S));
}

__global__ void dyn_conv_fwd_kernel(const uint16_t* __restrict__ x,
                                    const uint16_t* __restrict__ base,
                                    const uint16_t* __restrict__ delta, uint16_t* __restrict__ y,
                                    DynConvShape s) {
    const int64_t n = s.R * s.D;
    for_each_index(n, [&](int64_t e) {
        const int64_t r = e / s.D, c = e % s.D;
        float acc = 0.0f;
        for (int64_t t = 0; t < taps(s, r); ++t)
            acc =
                __fadd_rn(acc, __fmul_rn(coef(s, base, delta, r, t, c), ld(x, (r - t) * s.D + c)));
        y[e] = static_cast<uint16_t>(f32_to_bf16_bits(acc));
    });
}

// dx[r, c] = sum over the rows r + t of the same block that read x[r, c] through tap t.
__global__ void dyn_conv_dx_kernel(const uint16_t* __restrict__ dy,
                                   const uint16_t* __restrict__ base,
                                   const uint16_t* __restrict__ delta, uint16_t* __restrict__ dx,
                                   DynConvShape s) {
    const int64_t n = s.R * s.D;
    for_each_index(n, [&](int64_t e) {
        const int64_t r = e / s.D, c = e % s.D;
        float acc = 0.0f;
        for (int64_t t = 0; t < s.k && r + t < s.R; ++t)
            if (taps(s, r + t) > t)
                acc = __fadd_rn(
                    acc, __fmul_rn(coef(s, base, delta, r + t, t, c), ld(dy, (r + t) * s.D + c)));
        dx[e] = static_cast<uint16_t>(f32_to_bf16_bits(acc));
    });
}

// dbase[half, t, c] += sum_r dy[r, c] x[r - t, c]: one thread per (t, c), rows in order.
__global__ void dyn_conv_dbase_kernel(const uint16_t* __restrict__ dy,
                                      const uint16_t* __restrict__ x, float* __restrict__ dbase,
                                      DynConvShape s) {
    const int64_t n = s.k * s.D;
    for_each_index(n, [&](int64_t e) {
        const int64_t t = e / s.D, c = e % s.D;
        float acc = 0.0f;
        for (int64_t r = 0; r < s.R; ++r)
            if (taps(s, r) > t)
                acc = __fadd_rn(acc, __fmul_rn(ld(dy, r * s.D + c), ld(x, (r - t) * s.D + c)));
        float* out = dbase + (s.half * s.k + t) * s.D + c;
        *out = __fadd_rn(*out, acc);
    });
}

// ddelta[r, (half*k + t)*G + g] = sum over the group's channels of dy[r, c] x[r - t, c].
__global__ void dyn_conv_ddelta_kernel(const uint16_t* __restrict__ dy,
                                       const uint16_t* __restrict__ x,
                                       uint16_t* __restrict__ ddelta, DynConvShape s) {
    const int64_t n = s.R * s.k * s.G;
    for_each_index(n, [&](int64_t e) {
        const int64_t r = e / (s.k * s.G), t = (e / s.G) % s.k, g = e % s.G;
        float acc = 0.0f;
        if (taps(s, r) > t)
            for (int64_t c = g * s.S; c < (g + 1) * s.S; ++c)
                acc = __fadd_rn(acc, __fmul_rn(ld(dy, r * s.D + c), ld(x, (r - t) * s.D + c)));
        ddelta[r * 2 * s.k * s.G + (s.half * s.k + t) * s.G + g] =
            static_cast<uint16_t>(f32_to_bf16_bits(acc));
    });
}

}  // namespace

void dyn_conv_fwd(const uint16_t* x, const uint16_t* base, const uint16_t* delta, uint16_t* y,
                  const DynConvShape& s, CUstream_st* stream) {
    if (s.R * s.D <= 0) return;
    dyn_conv_fwd_kernel<<<grid_blocks(s.R * s.D), kThreads, 0, stream>>>(x, base, delta, y, s);
    DF_CUDA_CHECK_LAUNCH(dyn_conv_fwd_kernel);
}

void dyn_conv_bwd(const uint16_t* dy, const uint16_t* x, const uint16_t* base,
                  const uint16_t* delta, uint16_t* dx, float* dbase, uint16_t* ddelta,
                  const DynConvShape& s, CUstream_st* stream) {
    if (s.R * s.D <= 0) return;
    dyn_conv_dx_kernel<<<grid_blocks(s.R * s.D), kThreads, 0, stream>>>(dy, base, delta, dx, s);
    DF_CUDA_CHECK_LAUNCH(dyn_conv_dx_kernel);
    dyn_conv_dbase_kernel<<<grid_blocks(s.k * s.D), kThreads, 0, stream>>>(dy, x, dbase, s);
    DF_CUDA_CHECK_LAUNCH(dyn_conv_dbase_kernel);
    dyn_conv_ddelta_kernel<<<grid_blocks(s.R * s.k * s.G), kThreads, 0, stream>>>(dy, x, ddelta, s);
    DF_CUDA_CHECK_LAUNCH(dyn_conv_ddelta_kernel);
}

}  // namespace dflash::cuda::kernels

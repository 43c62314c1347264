// Device helpers the element-wise kernels share: bf16 <-> f32 conversion with the same bits as
// core/dtype.h (round to nearest even, NaN kept quiet with its sign and top payload bits, so a copy
// on the GPU and on the CPU agree on every input), loads and stores of N consecutive elements as
// 16-byte accesses where N allows, a grid-stride loop over vectors with a scalar tail, and the
// group reduction the row kernels (rmsnorm) use. No fmt here (Note [No fmt in .cu files]).
// Used by kernels/{copy,embedding,rmsnorm,rope,swiglu,elementwise,adamw}.cu and tested through
// tests/cuda/*_cuda_test.cpp.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace dflash::cuda::kernels {

// Threads per block of the grid-stride kernels, and the largest grid they launch. The cap is a
// constant (not derived from the SM count), so a kernel's work split, and with it every reduction
// order, is the same on every GPU.
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;

inline bool aligned16(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & uintptr_t{15}) == 0;
}

// Blocks for a grid-stride loop over `items` (> 0) work items.
inline unsigned grid_blocks(int64_t items, int threads = kThreads,
                            int64_t max_blocks = kMaxBlocks) {
    const int64_t need = (items + threads - 1) / threads;
    return static_cast<unsigned>(std::max<int64_t>(1, std::min(need, max_blocks)));
}

__device__ __forceinline__ float bf16_bits_to_f32(uint32_t h) {
    return __uint_as_float(h << 16);
}

__device__ __forceinline__ uint32_t f32_to_bf16_bits(float f) {
    const uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x0040u;
    return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    return f32_to_bf16_bits(lo) | (f32_to_bf16_bits(hi) << 16);
}

__device__ __forceinline__ void unpack_bf16x2(uint32_t w, float& lo, float& hi) {
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
}

// ---- N consecutive elements <-> float[N] -------------------------------------------------------
// 16-byte accesses when N is a multiple of a 16-byte vector (the caller guarantees the pointer's
// alignment), else element by element.
template <int N>
__device__ __forceinline__ void load_vec(const float* p, float (&o)[N]) {
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int k = 0; k < N / 4; ++k) {
            const float4 v = reinterpret_cast<const float4*>(p)[k];
            o[4 * k] = v.x;
            o[4 * k + 1] = v.y;
            o[4 * k + 2] = v.z;
            o[4 * k + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] = p[k];
    }
}

template <int N>
__device__ __forceinline__ void load_vec(const uint16_t* p, float (&o)[N]) {
    if constexpr (N % 8 == 0) {
#pragma unroll
        for (int k = 0; k < N / 8; ++k) {
            const uint4 v = reinterpret_cast<const uint4*>(p)[k];
            unpack_bf16x2(v.x, o[8 * k], o[8 * k + 1]);
            unpack_bf16x2(v.y, o[8 * k + 2], o[8 * k + 3]);
            unpack_bf16x2(v.z, o[8 * k + 4], o[8 * k + 5]);
            unpack_bf16x2(v.w, o[8 * k + 6], o[8 * k + 7]);
        }
    } else if constexpr (N % 4 == 0) {
#pragma unroll
        for (int k = 0; k < N / 4; ++k) {
            const uint2 v = reinterpret_cast<const uint2*>(p)[k];
            unpack_bf16x2(v.x, o[4 * k], o[4 * k + 1]);
            unpack_bf16x2(v.y, o[4 * k + 2], o[4 * k + 3]);
        }
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] = bf16_bits_to_f32(p[k]);
    }
}

template <int N>
__device__ __forceinline__ void store_vec(float* p, const float (&v)[N]) {
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int k = 0; k < N / 4; ++k)
            reinterpret_cast<float4*>(p)[k] =
                make_float4(v[4 * k], v[4 * k + 1], v[4 * k + 2], v[4 * k + 3]);
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k) p[k] = v[k];
    }
}

template <int N>
__device__ __forceinline__ void store_vec(uint16_t* p, const float (&v)[N]) {
    if constexpr (N % 8 == 0) {
#pragma unroll
        for (int k = 0; k < N / 8; ++k)
            reinterpret_cast<uint4*>(p)[k] = make_uint4(
                pack_bf16x2(v[8 * k], v[8 * k + 1]), pack_bf16x2(v[8 * k + 2], v[8 * k + 3]),
                pack_bf16x2(v[8 * k + 4], v[8 * k + 5]), pack_bf16x2(v[8 * k + 6], v[8 * k + 7]));
    } else if constexpr (N % 4 == 0) {
#pragma unroll
        for (int k = 0; k < N / 4; ++k)
            reinterpret_cast<uint2*>(p)[k] = make_uint2(pack_bf16x2(v[4 * k], v[4 * k + 1]),
                                                        pack_bf16x2(v[4 * k + 2], v[4 * k + 3]));
    } else {
#pragma unroll
        for (int k = 0; k < N; ++k) p[k] = static_cast<uint16_t>(f32_to_bf16_bits(v[k]));
    }
}

// Calls f.template operator()<VEC>(i) for every vector start i = 0, VEC, 2 VEC, ... below n / VEC *
// VEC, and f.template operator()<1>(i) for each of the n % VEC tail elements, over a grid-stride
// loop with 64-bit indices (n may exceed 2^31).
template <int VEC, class F>
__device__ __forceinline__ void grid_stride_vec(int64_t n, F&& f) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t nvec = n / VEC;
    for (int64_t i = tid; i < nvec; i += stride) f.template operator()<VEC>(i * VEC);
    if constexpr (VEC > 1) {
        const int64_t t = nvec * VEC + tid;
        if (t < n) f.template operator()<1>(t);
    }
}

// Sum of v over a group of `width` consecutive lanes (a power of two up to 32). Every lane of the
// group gets the same bits: at each butterfly step a lane and its partner add the same two values,
// and float addition is commutative. All 32 lanes of the warp must call it.
__device__ __forceinline__ float group_sum(float v, int width) {
    for (int o = width / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the whole block (blockDim.x a multiple of 32, at most 1024), the same bits on every
// thread (warp sums added in warp order). `red` holds 32 floats; all threads must call it.
__device__ __forceinline__ float block_sum(float v, float* red) {
    v = group_sum(v, 32);
    const int warp = threadIdx.x / 32;
    __syncthreads();  // an earlier call may still be reading red
    if ((threadIdx.x & 31) == 0) red[warp] = v;
    __syncthreads();
    float s = 0.0f;
    const int warps = blockDim.x / 32;
    for (int w = 0; w < warps; ++w) s += red[w];
    return s;
}

}  // namespace dflash::cuda::kernels

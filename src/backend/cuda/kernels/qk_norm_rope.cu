// qk_norm_rope_cache's kernel: the step between the fused q/k/v projection and the attention of a
// decode block, one launch where the unfused step took seven (two head norms, two RoPEs, two cache
// writes and a copy). A warp owns one (row, head) of qkv: a q or k head is normalised (the
// per-head RMSNorm, rounded to bf16 as rmsnorm_fwd's output is), rotated as rope_fwd rotates
// (f32 angle, precise sincosf, explicitly rounded products) and written to q_out or to the cache;
// a v head is copied to the cache. The head passes through the warp's shared memory, so a value
// and its rotation partner (i, i + half) can live in different lanes. Tested by
// tests/cuda/rows_linear_cuda_test.cpp.
#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/rows_linear.h"

namespace dflash::cuda::rows {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxDh = 256;

__device__ __forceinline__ float bf(uint16_t h) {
    return __uint_as_float(static_cast<uint32_t>(h) << 16);
}
__device__ __forceinline__ uint16_t to_bf(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__global__ void __launch_bounds__(kWarpsPerBlock * 32) qk_norm_rope_kernel(const QkNormRopeArgs a) {
    __shared__ float head[kWarpsPerBlock][kMaxDh];
    pdl::wait();  // qkv, row0 and positions come from the kernels before this one
    pdl::launch_dependents();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int heads = a.h + 2 * a.hkv;
    const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + warp;
    if (item >= static_cast<int64_t>(a.rows) * heads) return;
    const int r = static_cast<int>(item / heads), hh = static_cast<int>(item % heads);
    const uint16_t* src = a.qkv + (static_cast<int64_t>(r) * heads + hh) * a.dh;
    const int64_t row = static_cast<int64_t>(__ldg(a.row0)) + r;
    const bool cached = row >= 0 && row < a.capacity;
    uint16_t* dst;
    const uint16_t* norm;
    if (hh < a.h) {
        dst = a.q_out + (static_cast<int64_t>(r) * a.h + hh) * a.dh;
        norm = a.q_norm;
    } else if (hh < a.h + a.hkv) {
        dst = cached ? a.k_cache + (row * a.hkv + (hh - a.h)) * a.dh : nullptr;
        norm = a.k_norm;
    } else {
        // v: straight to the cache.
        if (!cached) return;
        uint16_t* v = a.v_cache + (row * a.hkv + (hh - a.h - a.hkv)) * a.dh;
        for (int i = lane; i < a.dh; i += 32) v[i] = src[i];
        return;
    }
    if (dst == nullptr) return;
    float* hv = head[warp];
    float ss = 0.0f;
    for (int i = lane; i < a.dh; i += 32) {
        const float x = bf(src[i]);
        hv[i] = x;
        ss = fmaf(x, x, ss);
    }
    if (norm != nullptr) {
        for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float s = static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / a.dh + a.eps));
        for (int i = lane; i < a.dh; i += 32) hv[i] = bf(to_bf(bf(norm[i]) * (hv[i] * s)));
    }
    __syncwarp();
    const float p = static_cast<float>(__ldg(a.positions + r));
    for (int i = lane; i < a.dh; i += 32) {
        float out = hv[i];
        if (i < 2 * a.half) {
            const int f = i < a.half ? i : i - a.half;
            float sn, cs;
            sincosf(__fmul_rn(p, __ldg(a.inv_freq + f)), &sn, &cs);
            const float x0 = hv[f], x1 = hv[f + a.half];
            out = i < a.half ? __fsub_rn(__fmul_rn(x0, cs), __fmul_rn(x1, sn))
                             : __fadd_rn(__fmul_rn(x1, cs), __fmul_rn(x0, sn));
        }
        dst[i] = to_bf(out);
    }
}

}  // namespace

void qk_norm_rope_cache(const QkNormRopeArgs& a, CUstream_st* stream) {
    const int64_t items = static_cast<int64_t>(a.rows) * (a.h + 2 * a.hkv);
    if (items <= 0) return;
    const auto blocks = static_cast<unsigned>((items + kWarpsPerBlock - 1) / kWarpsPerBlock);
    DF_PDL_LAUNCH(a.pdl, qk_norm_rope_kernel, blocks, kWarpsPerBlock * 32, 0, stream, a);
}

}  // namespace dflash::cuda::rows

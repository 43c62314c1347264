// RoPE kernel: a thread owns VEC frequency pairs of one position and a few heads, so each cos/sin
// is computed once per kHeadsPerThread heads. The arithmetic follows the CPU reference operation by
// operation (explicitly rounded multiplies and adds, no contraction; precise sincosf), so the
// result differs from it only by sincosf's error (<= 2 ulp) before the bf16 rounding.
// Tested by tests/cuda/rope_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/rope.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

constexpr int kHeadsPerThread = 4;

template <int VEC>
__global__ void rope_kernel(uint16_t* __restrict__ x, const int32_t* __restrict__ positions,
                            const float* __restrict__ inv_freq, int64_t seq, int heads, int half,
                            int dh, float sign) {
    const int nvec = half / VEC;
    const int hgroups = (heads + kHeadsPerThread - 1) / kHeadsPerThread;
    const int64_t items = seq * hgroups * nvec;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
         i += stride) {
        const int iv = static_cast<int>(i % nvec);
        const int64_t t = i / nvec;
        const int hg = static_cast<int>(t % hgroups);
        const int64_t s = t / hgroups;
        const float p = static_cast<float>(positions[s]);
        float f[VEC], cs[VEC], sn[VEC];
        load_vec<VEC>(inv_freq + iv * VEC, f);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            float sj;
            sincosf(__fmul_rn(p, f[j]), &sj, &cs[j]);
            sn[j] = sign * sj;  // exact: sign is +-1
        }
        const int h0 = hg * kHeadsPerThread;
        const int h1 = min(heads, h0 + kHeadsPerThread);
#pragma unroll
        for (int h = h0; h < h0 + kHeadsPerThread; ++h) {
            if (h >= h1) break;
            // Partial rotary: dims [2 * half, dh) of the head are left as they are.
            uint16_t* v = x + (s * heads + h) * dh + iv * VEC;
            float a[VEC], b[VEC], oa[VEC], ob[VEC];
            load_vec<VEC>(v, a);
            load_vec<VEC>(v + half, b);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                oa[j] = __fsub_rn(__fmul_rn(a[j], cs[j]), __fmul_rn(b[j], sn[j]));
                ob[j] = __fadd_rn(__fmul_rn(b[j], cs[j]), __fmul_rn(a[j], sn[j]));
            }
            store_vec<VEC>(v, oa);
            store_vec<VEC>(v + half, ob);
        }
    }
}

}  // namespace

void rope(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t seq, int64_t heads,
          int64_t half, int64_t dh, float sign, CUstream_st* stream) {
    if (seq <= 0 || heads <= 0 || half <= 0) return;
    const int64_t hgroups = (heads + kHeadsPerThread - 1) / kHeadsPerThread;
    const int h = static_cast<int>(heads);
    const int hf = static_cast<int>(half);
    const int d = static_cast<int>(dh);
    if (half % 8 == 0 && dh % 8 == 0 && aligned16(x) && aligned16(inv_freq)) {
        rope_kernel<8><<<grid_blocks(seq * hgroups * (half / 8)), kThreads, 0, stream>>>(
            x, positions, inv_freq, seq, h, hf, d, sign);
        DF_CUDA_CHECK_LAUNCH(rope_kernel_vec);
    } else {
        rope_kernel<1><<<grid_blocks(seq * hgroups * half), kThreads, 0, stream>>>(
            x, positions, inv_freq, seq, h, hf, d, sign);
        DF_CUDA_CHECK_LAUNCH(rope_kernel_scalar);
    }
}

}  // namespace dflash::cuda::kernels

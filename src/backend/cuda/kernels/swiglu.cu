// SwiGLU kernels: 8 bf16 values per 16-byte access, fp32 math in the CPU reference's operation
// order (explicitly rounded operations, precise expf), so the two differ only by expf's error
// before the bf16 rounding. Tested by tests/cuda/swiglu_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/sigmoid.cuh"
#include "backend/cuda/kernels/swiglu.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

template <int VEC>
__global__ void swiglu_fwd_kernel(const uint16_t* __restrict__ gate,
                                  const uint16_t* __restrict__ up, uint16_t* __restrict__ out,
                                  int64_t n) {
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        float g[N], u[N], o[N];
        load_vec<N>(gate + i, g);
        load_vec<N>(up + i, u);
#pragma unroll
        for (int j = 0; j < N; ++j) o[j] = __fmul_rn(__fmul_rn(g[j], sigmoid(g[j])), u[j]);
        store_vec<N>(out + i, o);
    });
}

// No __restrict__: dgate or dup may alias an input (each element is read before it is written).
template <int VEC>
__global__ void swiglu_bwd_kernel(const uint16_t* dout, const uint16_t* gate, const uint16_t* up,
                                  uint16_t* dgate, uint16_t* dup, int64_t n) {
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        float d[N], g[N], u[N], dg[N], du[N];
        load_vec<N>(dout + i, d);
        load_vec<N>(gate + i, g);
        load_vec<N>(up + i, u);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const float s = sigmoid(g[j]);
            du[j] = __fmul_rn(__fmul_rn(d[j], g[j]), s);
            // d silu(g)/dg = s + g s (1 - s)
            const float ds = __fadd_rn(s, __fmul_rn(__fmul_rn(g[j], s), __fsub_rn(1.0f, s)));
            dg[j] = __fmul_rn(__fmul_rn(d[j], u[j]), ds);
        }
        store_vec<N>(dup + i, du);
        store_vec<N>(dgate + i, dg);
    });
}

}  // namespace

void swiglu_fwd(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n,
                CUstream_st* stream) {
    if (n <= 0) return;
    if (aligned16(gate) && aligned16(up) && aligned16(out)) {
        swiglu_fwd_kernel<8><<<grid_blocks(n / 8 + 1), kThreads, 0, stream>>>(gate, up, out, n);
        DF_CUDA_CHECK_LAUNCH(swiglu_fwd_kernel_vec);
    } else {
        swiglu_fwd_kernel<1><<<grid_blocks(n), kThreads, 0, stream>>>(gate, up, out, n);
        DF_CUDA_CHECK_LAUNCH(swiglu_fwd_kernel_scalar);
    }
}

void swiglu_bwd(const uint16_t* dout, const uint16_t* gate, const uint16_t* up, uint16_t* dgate,
                uint16_t* dup, int64_t n, CUstream_st* stream) {
    if (n <= 0) return;
    if (aligned16(dout) && aligned16(gate) && aligned16(up) && aligned16(dgate) && aligned16(dup)) {
        swiglu_bwd_kernel<8>
            <<<grid_blocks(n / 8 + 1), kThreads, 0, stream>>>(dout, gate, up, dgate, dup, n);
        DF_CUDA_CHECK_LAUNCH(swiglu_bwd_kernel_vec);
    } else {
        swiglu_bwd_kernel<1>
            <<<grid_blocks(n), kThreads, 0, stream>>>(dout, gate, up, dgate, dup, n);
        DF_CUDA_CHECK_LAUNCH(swiglu_bwd_kernel_scalar);
    }
}

}  // namespace dflash::cuda::kernels

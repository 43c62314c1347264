// Gating kernels: bf16 in and out, fp32 math in the CPU reference's operation order (explicitly
// rounded operations, precise expf), so the two differ only by expf's error before the bf16
// rounding. Tested by tests/cuda/gating_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/gating.h"
#include "backend/cuda/kernels/sigmoid.cuh"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

// No __restrict__ on x and y: y may alias x (each element is read before it is written).
template <int VEC>
__global__ void sigmoid_mul_kernel(const uint16_t* x, const uint16_t* __restrict__ gate,
                                   uint16_t* y, int64_t n) {
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        float a[N], g[N], o[N];
        load_vec<N>(x + i, a);
        load_vec<N>(gate + i, g);
#pragma unroll
        for (int j = 0; j < N; ++j) o[j] = __fmul_rn(a[j], sigmoid(g[j]));
        store_vec<N>(y + i, o);
    });
}

// One thread per element; the row's gate is recomputed per element (cheap next to the load).
__global__ void add_sigmoid_scaled_kernel(uint16_t* __restrict__ y, const uint16_t* __restrict__ x,
                                          const float* __restrict__ s, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float gate = sigmoid(s[i / cols]);
        const float v = __fadd_rn(bf16_bits_to_f32(y[i]), __fmul_rn(gate, bf16_bits_to_f32(x[i])));
        y[i] = static_cast<uint16_t>(f32_to_bf16_bits(v));
    }
}

}  // namespace

void sigmoid_mul(const uint16_t* x, const uint16_t* gate, uint16_t* y, int64_t n,
                 CUstream_st* stream) {
    if (n <= 0) return;
    if (aligned16(x) && aligned16(gate) && aligned16(y)) {
        sigmoid_mul_kernel<8><<<grid_blocks(n / 8 + 1), kThreads, 0, stream>>>(x, gate, y, n);
        DF_CUDA_CHECK_LAUNCH(sigmoid_mul_kernel_vec);
    } else {
        sigmoid_mul_kernel<1><<<grid_blocks(n), kThreads, 0, stream>>>(x, gate, y, n);
        DF_CUDA_CHECK_LAUNCH(sigmoid_mul_kernel_scalar);
    }
}

void add_sigmoid_scaled(uint16_t* y, const uint16_t* x, const float* s, int64_t rows, int64_t cols,
                        CUstream_st* stream) {
    if (rows <= 0 || cols <= 0) return;
    add_sigmoid_scaled_kernel<<<grid_blocks(rows * cols), kThreads, 0, stream>>>(y, x, s, rows,
                                                                                 cols);
    DF_CUDA_CHECK_LAUNCH(add_sigmoid_scaled_kernel);
}

}  // namespace dflash::cuda::kernels

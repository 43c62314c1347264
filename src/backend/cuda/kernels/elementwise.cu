// Element-wise kernels: residual add / gradient accumulation (y += alpha x, any mix of f32 and
// bf16) and scaling, 16-byte accesses where the pointers allow. The f32 results have the bits of
// the CPU reference (separately rounded multiply and add, never a fused multiply-add); bf16 results
// are those bits rounded to bf16. Tested by tests/cuda/elementwise_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

// y may alias x (y += alpha * y): each element is read before it is written, so no __restrict__.
template <int VEC, class TY, class TX>
__global__ void add_kernel(TY* y, const TX* x, float alpha, int64_t n) {
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        float a[N], b[N];
        load_vec<N>(y + i, a);
        load_vec<N>(x + i, b);
#pragma unroll
        for (int j = 0; j < N; ++j) a[j] = __fadd_rn(a[j], __fmul_rn(alpha, b[j]));
        store_vec<N>(y + i, a);
    });
}

template <int VEC, class T>
__global__ void scale_kernel(T* __restrict__ y, float alpha, int64_t n) {
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        float a[N];
        load_vec<N>(y + i, a);
#pragma unroll
        for (int j = 0; j < N; ++j) a[j] = __fmul_rn(a[j], alpha);
        store_vec<N>(y + i, a);
    });
}

template <class TY, class TB>
__global__ void row_bias_kernel(TY* y, const TB* b, int64_t cols, int64_t n) {
    grid_stride_vec<1>(n, [&]<int N>(int64_t i) {
        float a[1], c[1];
        load_vec<1>(y + i, a);
        load_vec<1>(b + i % cols, c);
        a[0] = __fadd_rn(a[0], c[0]);
        store_vec<1>(y + i, a);
    });
}

template <class TY, class TB>
void row_bias(void* y, const void* b, int64_t cols, int64_t n, cudaStream_t stream) {
    row_bias_kernel<<<grid_blocks(n), kThreads, 0, stream>>>(static_cast<TY*>(y),
                                                             static_cast<const TB*>(b), cols, n);
    DF_CUDA_CHECK_LAUNCH(row_bias_kernel);
}

template <class TY, class TX>
void add(void* yv, const void* xv, float alpha, int64_t n, cudaStream_t stream) {
    auto* y = static_cast<TY*>(yv);
    const auto* x = static_cast<const TX*>(xv);
    if (aligned16(y) && aligned16(x)) {
        add_kernel<8><<<grid_blocks(n / 8 + 1), kThreads, 0, stream>>>(y, x, alpha, n);
        DF_CUDA_CHECK_LAUNCH(add_kernel_vec);
    } else {
        add_kernel<1><<<grid_blocks(n), kThreads, 0, stream>>>(y, x, alpha, n);
        DF_CUDA_CHECK_LAUNCH(add_kernel_scalar);
    }
}

template <class T>
void scale(void* yv, float alpha, int64_t n, cudaStream_t stream) {
    auto* y = static_cast<T*>(yv);
    if (aligned16(y)) {
        scale_kernel<8><<<grid_blocks(n / 8 + 1), kThreads, 0, stream>>>(y, alpha, n);
        DF_CUDA_CHECK_LAUNCH(scale_kernel_vec);
    } else {
        scale_kernel<1><<<grid_blocks(n), kThreads, 0, stream>>>(y, alpha, n);
        DF_CUDA_CHECK_LAUNCH(scale_kernel_scalar);
    }
}

}  // namespace

void add_inplace(void* y, bool y_bf16, const void* x, bool x_bf16, float alpha, int64_t n,
                 CUstream_st* stream) {
    if (n <= 0) return;
    if (y_bf16 && x_bf16) add<uint16_t, uint16_t>(y, x, alpha, n, stream);
    if (y_bf16 && !x_bf16) add<uint16_t, float>(y, x, alpha, n, stream);
    if (!y_bf16 && x_bf16) add<float, uint16_t>(y, x, alpha, n, stream);
    if (!y_bf16 && !x_bf16) add<float, float>(y, x, alpha, n, stream);
}

void add_row_bias(void* y, bool y_bf16, const void* bias, bool bias_bf16, int64_t cols, int64_t n,
                  CUstream_st* stream) {
    if (n <= 0) return;
    if (y_bf16 && bias_bf16) row_bias<uint16_t, uint16_t>(y, bias, cols, n, stream);
    if (y_bf16 && !bias_bf16) row_bias<uint16_t, float>(y, bias, cols, n, stream);
    if (!y_bf16 && bias_bf16) row_bias<float, uint16_t>(y, bias, cols, n, stream);
    if (!y_bf16 && !bias_bf16) row_bias<float, float>(y, bias, cols, n, stream);
}

void scale_inplace(void* y, bool y_bf16, float alpha, int64_t n, CUstream_st* stream) {
    if (n <= 0) return;
    if (y_bf16) {
        scale<uint16_t>(y, alpha, n, stream);
    } else {
        scale<float>(y, alpha, n, stream);
    }
}

}  // namespace dflash::cuda::kernels

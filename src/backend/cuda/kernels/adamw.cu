// Optimizer kernels. AdamW is one pass over the flat parameter buffers (4 floats per 16-byte
// access, 64-bit indices), each operation explicitly rounded in the CPU reference's order so the
// two agree bit for bit. sum_squares accumulates in double: per-thread strided sums, a fixed tree
// within the block, then the block partials in order by one block.
// Tested by tests/cuda/adamw_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/adamw.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

constexpr int kSumThreads = 256;
constexpr int64_t kSumMaxBlocks = 1024;

template <int VEC>
__global__ void adamw_kernel(float* __restrict__ master, const float* __restrict__ grad,
                             float* __restrict__ m, float* __restrict__ v, int64_t n,
                             AdamWScalars sc, const float* __restrict__ step_scalars,
                             const float* __restrict__ grad_scale, uint16_t* __restrict__ value) {
    const float gs = grad_scale != nullptr ? *grad_scale : 1.0f;
    if (step_scalars != nullptr) {
        sc.decay = step_scalars[0];
        sc.step_size = step_scalars[1];
        sc.bc2_sqrt = step_scalars[2];
    }
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        float p[N], g[N], mi[N], vi[N];
        load_vec<N>(master + i, p);
        load_vec<N>(grad + i, g);
        load_vec<N>(m + i, mi);
        load_vec<N>(v + i, vi);
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const float gj = __fmul_rn(g[j], gs);  // x * 1 == x: the unscaled case is the same
            mi[j] = __fadd_rn(__fmul_rn(sc.b1, mi[j]), __fmul_rn(sc.one_m_b1, gj));
            vi[j] = __fadd_rn(__fmul_rn(sc.b2, vi[j]), __fmul_rn(__fmul_rn(sc.one_m_b2, gj), gj));
            const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi[j]), sc.bc2_sqrt), sc.eps);
            p[j] = __fsub_rn(__fmul_rn(p[j], sc.decay),
                             __fmul_rn(sc.step_size, __fdiv_rn(mi[j], denom)));
        }
        store_vec<N>(m + i, mi);
        store_vec<N>(v + i, vi);
        store_vec<N>(master + i, p);
        if (value != nullptr) store_vec<N>(value + i, p);
    });
}

__device__ __forceinline__ double warp_sum_d(double s) {
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// Block sum in a fixed order: warps by shuffle, then warp 0 over the warp sums.
__device__ __forceinline__ double block_sum_d(double s) {
    __shared__ double red[kSumThreads / 32];
    s = warp_sum_d(s);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x / 32] = s;
    __syncthreads();
    double t = 0.0;
    if (threadIdx.x < 32) {
        t = threadIdx.x < kSumThreads / 32 ? red[threadIdx.x] : 0.0;
        t = warp_sum_d(t);
    }
    return t;  // valid on thread 0
}

template <int VEC>
__global__ void __launch_bounds__(kSumThreads)
    sum_squares_partial_kernel(const float* __restrict__ x, int64_t n,
                               double* __restrict__ partial) {
    double s = 0.0;
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        float a[N];
        load_vec<N>(x + i, a);
#pragma unroll
        for (int j = 0; j < N; ++j)
            s = fma(static_cast<double>(a[j]), static_cast<double>(a[j]), s);
    });
    s = block_sum_d(s);
    if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

__global__ void __launch_bounds__(kSumThreads)
    sum_squares_final_kernel(const double* __restrict__ partial, int nparts,
                             float* __restrict__ out) {
    double s = 0.0;
    for (int b = threadIdx.x; b < nparts; b += blockDim.x) s += partial[b];
    s = block_sum_d(s);
    if (threadIdx.x == 0) out[0] = static_cast<float>(s);
}

__global__ void clip_scale_kernel(const float* __restrict__ norm_sq, float max_norm,
                                  float* __restrict__ scale) {
    const double norm = sqrt(static_cast<double>(norm_sq[0]));
    // The small epsilon follows torch.nn.utils.clip_grad_norm_ (max / (norm + 1e-6)).
    const bool clip = max_norm > 0 && norm > max_norm;
    scale[0] = clip ? static_cast<float>(max_norm / (norm + 1e-6)) : 1.0f;
}

// The partial split depends on n and on whether the vector path runs (alignment).
unsigned sum_blocks(int64_t n, int vec) {
    return grid_blocks(n / vec + 1, kSumThreads, kSumMaxBlocks);
}

}  // namespace

void adamw_step(float* master, const float* grad, float* m, float* v, int64_t n,
                const AdamWScalars& sc, const float* step_scalars, const float* grad_scale,
                uint16_t* value, CUstream_st* stream) {
    if (n <= 0) return;
    const bool vec = aligned16(master) && aligned16(grad) && aligned16(m) && aligned16(v) &&
                     (value == nullptr || (reinterpret_cast<uintptr_t>(value) & 7u) == 0);
    if (vec) {
        adamw_kernel<4><<<grid_blocks(n / 4 + 1), kThreads, 0, stream>>>(
            master, grad, m, v, n, sc, step_scalars, grad_scale, value);
        DF_CUDA_CHECK_LAUNCH(adamw_kernel_vec);
    } else {
        adamw_kernel<1><<<grid_blocks(n), kThreads, 0, stream>>>(master, grad, m, v, n, sc,
                                                                 step_scalars, grad_scale, value);
        DF_CUDA_CHECK_LAUNCH(adamw_kernel_scalar);
    }
}

size_t sum_squares_workspace_bytes(int64_t n) {
    return sizeof(double) * std::max(sum_blocks(n, 1), sum_blocks(n, 4));
}

void sum_squares(const float* x, int64_t n, float* out, void* workspace, CUstream_st* stream) {
    auto* partial = static_cast<double*>(workspace);
    unsigned blocks = 1;
    if (n <= 0) {
        DF_CUDA_CHECK(cudaMemsetAsync(partial, 0, sizeof(double), stream));
    } else if (aligned16(x)) {
        blocks = sum_blocks(n, 4);
        sum_squares_partial_kernel<4><<<blocks, kSumThreads, 0, stream>>>(x, n, partial);
        DF_CUDA_CHECK_LAUNCH(sum_squares_partial_kernel_vec);
    } else {
        blocks = sum_blocks(n, 1);
        sum_squares_partial_kernel<1><<<blocks, kSumThreads, 0, stream>>>(x, n, partial);
        DF_CUDA_CHECK_LAUNCH(sum_squares_partial_kernel_scalar);
    }
    sum_squares_final_kernel<<<1, kSumThreads, 0, stream>>>(partial, static_cast<int>(blocks), out);
    DF_CUDA_CHECK_LAUNCH(sum_squares_final_kernel);
}

void clip_scale(const float* norm_sq, float max_norm, float* scale, CUstream_st* stream) {
    clip_scale_kernel<<<1, 1, 0, stream>>>(norm_sq, max_norm, scale);
    DF_CUDA_CHECK_LAUNCH(clip_scale_kernel);
}

}  // namespace dflash::cuda::kernels

// Copy-family kernels: f32 <-> bf16 conversion and pattern fills, 16-byte accesses when every
// pointer allows, a scalar path for views that start mid-vector. Same-dtype copies are
// cudaMemcpyAsync. Tested by tests/cuda/copy_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/copy.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

template <int VEC, class TD, class TS>
__global__ void convert_kernel(TD* __restrict__ dst, const TS* __restrict__ src, int64_t n) {
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        float v[N];
        load_vec<N>(src + i, v);
        store_vec<N>(dst + i, v);
    });
}

// VEC elements of T make one 16-byte store (or VEC = 1).
template <class T, int VEC>
__global__ void fill_kernel(T* __restrict__ dst, int64_t n, T pattern) {
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        if constexpr (N * sizeof(T) == 16) {
            uint32_t w = pattern;
            if constexpr (sizeof(T) == 2) w |= w << 16;
            reinterpret_cast<uint4*>(dst + i)[0] = make_uint4(w, w, w, w);
        } else {
#pragma unroll
            for (int k = 0; k < N; ++k) dst[i + k] = pattern;
        }
    });
}

// Word W (16 or 1 bytes) at a time: word i of the source goes to word row0*row_words + i of dst.
template <class W>
__global__ void write_rows_kernel(W* __restrict__ dst, int64_t dst_words, const int32_t* row0,
                                  const W* __restrict__ src, int64_t words, int64_t row_words) {
    const int64_t base = static_cast<int64_t>(*row0) * row_words;
    if (base < 0) return;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        if (base + i < dst_words) dst[base + i] = src[i];
}

template <class TD, class TS>
void convert(TD* dst, const TS* src, int64_t n, cudaStream_t stream) {
    if (n <= 0) return;
    if (aligned16(dst) && aligned16(src)) {
        convert_kernel<8><<<grid_blocks(n / 8 + 1), kThreads, 0, stream>>>(dst, src, n);
        DF_CUDA_CHECK_LAUNCH(convert_kernel<8>);
    } else {
        convert_kernel<1><<<grid_blocks(n), kThreads, 0, stream>>>(dst, src, n);
        DF_CUDA_CHECK_LAUNCH(convert_kernel<1>);
    }
}

template <class T>
void fill(void* dst, int64_t n, T pattern, cudaStream_t stream) {
    if (n <= 0) return;
    constexpr int kVec = 16 / sizeof(T);
    T* p = static_cast<T*>(dst);
    if (aligned16(p)) {
        fill_kernel<T, kVec><<<grid_blocks(n / kVec + 1), kThreads, 0, stream>>>(p, n, pattern);
        DF_CUDA_CHECK_LAUNCH(fill_kernel_vec);
    } else {
        fill_kernel<T, 1><<<grid_blocks(n), kThreads, 0, stream>>>(p, n, pattern);
        DF_CUDA_CHECK_LAUNCH(fill_kernel_scalar);
    }
}

}  // namespace

void copy_bytes(void* dst, const void* src, size_t bytes, CUstream_st* stream) {
    if (bytes == 0 || dst == src) return;
    DF_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
}

void f32_to_bf16(uint16_t* dst, const float* src, int64_t n, CUstream_st* stream) {
    convert(dst, src, n, stream);
}

void bf16_to_f32(float* dst, const uint16_t* src, int64_t n, CUstream_st* stream) {
    convert(dst, src, n, stream);
}

void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
             size_t rows, CUstream_st* stream) {
    if (width == 0 || rows == 0) return;
    DF_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows,
                                    cudaMemcpyDeviceToDevice, stream));
}

void write_rows(void* dst, int64_t dst_rows, const int32_t* row0, const void* src, int64_t rows,
                size_t row_bytes, CUstream_st* stream) {
    if (rows <= 0 || row_bytes == 0) return;
    const auto total = static_cast<int64_t>(row_bytes) * rows;
    if (row_bytes % 16 == 0 && aligned16(dst) && aligned16(src)) {
        const auto rw = static_cast<int64_t>(row_bytes / 16);
        write_rows_kernel<uint4><<<grid_blocks(total / 16), kThreads, 0, stream>>>(
            static_cast<uint4*>(dst), dst_rows * rw, row0, static_cast<const uint4*>(src),
            total / 16, rw);
        DF_CUDA_CHECK_LAUNCH(write_rows_kernel_vec);
    } else {
        const auto rw = static_cast<int64_t>(row_bytes);
        write_rows_kernel<unsigned char><<<grid_blocks(total), kThreads, 0, stream>>>(
            static_cast<unsigned char*>(dst), dst_rows * rw, row0,
            static_cast<const unsigned char*>(src), total, rw);
        DF_CUDA_CHECK_LAUNCH(write_rows_kernel_bytes);
    }
}

void fill_u32(void* dst, int64_t n, uint32_t pattern, CUstream_st* stream) {
    fill<uint32_t>(dst, n, pattern, stream);
}

void fill_u16(void* dst, int64_t n, uint16_t pattern, CUstream_st* stream) {
    fill<uint16_t>(dst, n, pattern, stream);
}

}  // namespace dflash::cuda::kernels

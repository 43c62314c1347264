// Element-wise kernels and their launchers (checks live in elementwise.cpp). Tested by
// tests/cuda/cuda_add_test.cpp.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/elementwise_launch.h"

namespace dflash::cuda::detail {

namespace {

constexpr int kThreads = 256;
// Enough blocks to fill an H200 (132 SMs) several times over; a grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 132 * 32;

// y may alias x (elementwise, each element read before it is written by the same thread).
__global__ void add_inplace_kernel(float* y, const float* x, int64_t n, float alpha) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride)
        y[i] = fmaf(alpha, x[i], y[i]);
}

}  // namespace

void launch_add_inplace(CUstream_st* stream, float* y, const float* x, int64_t n, float alpha) {
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks);
    add_inplace_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(y, x, n, alpha);
    DF_CUDA_CHECK_LAUNCH(add_inplace_kernel);
}

}  // namespace dflash::cuda::detail

// fill_normal_hash: one thread per element, the numbers of backend/noise_hash.h (double
// arithmetic rounded op by op, as on the host), the product with stddev rounded as the CPU
// reference (backend/cpu/normal_fill.cpp). Tested by tests/cuda/normal_fill_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/grid_stride.cuh"
#include "backend/cuda/kernels/normal_fill.h"
#include "backend/cuda/kernels/vec_io.cuh"
#include "backend/noise_hash.h"

namespace dflash::cuda::kernels {
namespace {

__global__ void normal_fill_kernel(float* __restrict__ x_f32, uint16_t* __restrict__ x_bf16,
                                   int64_t n, uint64_t seed, float stddev) {
    for_each_index(n, [&](int64_t i) {
        const float v = __fmul_rn(stddev, normal_hash(seed, static_cast<uint64_t>(i)));
        if (x_f32 != nullptr)
            x_f32[i] = v;
        else
            x_bf16[i] = static_cast<uint16_t>(f32_to_bf16_bits(v));
    });
}

}  // namespace

void fill_normal_hash(float* x_f32, uint16_t* x_bf16, int64_t n, uint64_t seed, float stddev,
                      CUstream_st* stream) {
    if (n <= 0) return;
    normal_fill_kernel<<<grid_blocks(n), kThreads, 0, stream>>>(x_f32, x_bf16, n, seed, stddev);
    DF_CUDA_CHECK_LAUNCH(normal_fill_kernel);
}

}  // namespace dflash::cuda::kernels

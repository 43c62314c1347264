// add_uniform_noise: one thread per element, the numbers of backend/noise_hash.h, the sum rounded
// as the CPU reference (backend/cpu/uniform_noise.cpp). Tested by tests/cuda/muon_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/grid_stride.cuh"
#include "backend/cuda/kernels/uniform_noise.h"
#include "backend/cuda/kernels/vec_io.cuh"
#include "backend/noise_hash.h"

namespace dflash::cuda::kernels {
namespace {

__global__ void uniform_noise_kernel(float* __restrict__ x_f32, uint16_t* __restrict__ x_bf16,
                                     int64_t n, const int32_t* __restrict__ seed, float amplitude) {
    const uint64_t s = (static_cast<uint64_t>(static_cast<uint32_t>(seed[1])) << 32) |
                       static_cast<uint32_t>(seed[0]);
    for_each_index(n, [&](int64_t i) {
        const float u = uniform_hash01(s, static_cast<uint64_t>(i));
        const float d = __fmul_rn(amplitude, __fsub_rn(__fmul_rn(2.0f, u), 1.0f));
        if (x_f32 != nullptr) {
            x_f32[i] = __fadd_rn(x_f32[i], d);
        } else {
            x_bf16[i] =
                static_cast<uint16_t>(f32_to_bf16_bits(__fadd_rn(bf16_bits_to_f32(x_bf16[i]), d)));
        }
    });
}

}  // namespace

void add_uniform_noise(float* x_f32, uint16_t* x_bf16, int64_t n, const int32_t* seed,
                       float amplitude, CUstream_st* stream) {
    if (n <= 0) return;
    uniform_noise_kernel<<<grid_blocks(n), kThreads, 0, stream>>>(x_f32, x_bf16, n, seed,
                                                                  amplitude);
    DF_CUDA_CHECK_LAUNCH(uniform_noise_kernel);
}

}  // namespace dflash::cuda::kernels

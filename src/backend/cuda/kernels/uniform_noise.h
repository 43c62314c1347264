// Raw launcher of add_uniform_noise (see cuda/uniform_noise.cpp for the Tensor-level op). bf16
// buffers are passed as uint16_t*. No fmt (Note [No fmt in .cu files]). Tested by
// tests/cuda/muon_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// x += amplitude * (2 u - 1), u = uniform_hash01(seed, i); x f32 or bf16 (one non-null); seed
// the two i32 words on the device.
void add_uniform_noise(float* x_f32, uint16_t* x_bf16, int64_t n, const int32_t* seed,
                       float amplitude, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

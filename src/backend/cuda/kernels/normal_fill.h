// Raw launcher of fill_normal_hash (see cuda/normal_fill.cpp for the Tensor-level op). bf16
// buffers are passed as uint16_t*. No fmt (Note [No fmt in .cu files]). Tested by
// tests/cuda/normal_fill_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// x[i] = stddev * normal_hash(seed, i); x f32 or bf16 (one non-null).
void fill_normal_hash(float* x_f32, uint16_t* x_bf16, int64_t n, uint64_t seed, float stddev,
                      CUstream_st* stream);

}  // namespace dflash::cuda::kernels

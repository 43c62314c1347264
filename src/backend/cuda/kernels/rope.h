// Raw launcher of RoPE (see rope.cpp for the Tensor-level ops): NeoX rotate-half on the first
// 2 * half dims of each head of bf16 x [seq, heads, dh] in place (the rest pass through). No fmt
// (Note [No fmt in .cu files]). Tested by tests/cuda/rope_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// angle(s, i) = float(positions[s]) * inv_freq[i] (f32), cos and sin in f32 (precise cosf/sinf);
// x[s, h, i] and x[s, h, i + half] rotated by `sign` * angle (sign -1: the backward), i < half;
// 2 * half <= dh.
void rope(uint16_t* x, const int32_t* positions, const float* inv_freq, int64_t seq, int64_t heads,
          int64_t half, int64_t dh, float sign, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

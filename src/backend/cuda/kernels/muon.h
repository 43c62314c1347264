// Raw launchers of Muon's element-wise kernels (see cuda/muon.cpp for the Tensor-level ops). bf16
// buffers are passed as uint16_t*. No fmt (Note [No fmt in .cu files]). Tested by
// tests/cuda/muon_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// g = grad * grad_scale[0] (null: 1); momentum = mu * momentum + g; update = g + mu * momentum.
void muon_momentum(const float* grad, const float* grad_scale, float* momentum, float mu,
                   float* update, int64_t n, CUstream_st* stream);
// out = x / (sqrt(norm_sq[0]) + eps), out f32 (out_f32) or bf16 (out_bf16): one of them non-null.
void muon_normalize(const float* x, const float* norm_sq, float eps, float* out_f32,
                    uint16_t* out_bf16, int64_t n, CUstream_st* stream);
// master = master * scalars[1] - scalars[0] * lr_factor * x; x f32 (x_f32) or bf16 (x_bf16);
// value (null: none) = bf16(master).
void muon_update(float* master, const float* x_f32, const uint16_t* x_bf16, const float* scalars,
                 float lr_factor, uint16_t* value, int64_t n, CUstream_st* stream);
}  // namespace dflash::cuda::kernels

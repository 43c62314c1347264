// Raw launchers of the optimizer family (see adamw.cpp for the Tensor-level ops): AdamW over flat
// f32 buffers, the deterministic sum of squares behind the global gradient norm, and the clip
// scale. No fmt (Note [No fmt in .cu files]). Tested by tests/cuda/adamw_cuda_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// The per-step scalars, computed on the host in double exactly as the CPU reference does.
struct AdamWScalars {
    float b1, b2, one_m_b1, one_m_b2, eps;
    float decay;      // 1 - lr * weight_decay
    float step_size;  // lr / (1 - b1^t)
    float bc2_sqrt;   // sqrt(1 - b2^t)
};

// g = grad * grad_scale[0] (grad_scale null: 1); m, v, master updated in place in the CPU
// reference's operation order; value (null: none) receives bf16(master). n may exceed 2^31.
// step_scalars (null: sc's) = {decay, step_size, bc2_sqrt} read on the device.
void adamw_step(float* master, const float* grad, float* m, float* v, int64_t n,
                const AdamWScalars& sc, const float* step_scalars, const float* grad_scale,
                uint16_t* value, CUstream_st* stream);

// Device workspace bytes sum_squares needs for n elements.
size_t sum_squares_workspace_bytes(int64_t n);
// out[0] = float(sum of double(x)^2): per-block double partials over a split that depends only on
// n, then one block adds them in a fixed tree order. Same bits every run.
void sum_squares(const float* x, int64_t n, float* out, void* workspace, CUstream_st* stream);

// scale[0] = max_norm / (sqrt(norm_sq[0]) + 1e-6) when max_norm > 0 and the norm exceeds it,
// else 1 (in double, as the CPU reference).
void clip_scale(const float* norm_sq, float max_norm, float* scale, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

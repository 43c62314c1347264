// Muon's element-wise kernels: one thread per element, each operation rounded in the CPU
// reference's order (backend/cpu/muon.cpp).
// Tested by tests/cuda/muon_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/grid_stride.cuh"
#include "backend/cuda/kernels/muon.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

__global__ void muon_momentum_kernel(const float* __restrict__ grad,
                                     const float* __restrict__ grad_scale,
                                     float* __restrict__ momentum, float mu,
                                     float* __restrict__ update, int64_t n) {
    const float gs = grad_scale != nullptr ? *grad_scale : 1.0f;
    for_each_index(n, [&](int64_t i) {
        const float g = __fmul_rn(grad[i], gs);
        const float m = __fadd_rn(__fmul_rn(mu, momentum[i]), g);
        momentum[i] = m;
        update[i] = __fadd_rn(g, __fmul_rn(mu, m));
    });
}

__global__ void muon_normalize_kernel(const float* __restrict__ x,
                                      const float* __restrict__ norm_sq, float eps,
                                      float* __restrict__ out_f32, uint16_t* __restrict__ out_bf16,
                                      int64_t n) {
    const float denom = __fadd_rn(__fsqrt_rn(*norm_sq), eps);
    for_each_index(n, [&](int64_t i) {
        const float y = __fdiv_rn(x[i], denom);
        if (out_f32 != nullptr) {
            out_f32[i] = y;
        } else {
            out_bf16[i] = static_cast<uint16_t>(f32_to_bf16_bits(y));
        }
    });
}

__global__ void muon_update_kernel(float* __restrict__ master, const float* __restrict__ x_f32,
                                   const uint16_t* __restrict__ x_bf16,
                                   const float* __restrict__ scalars, float lr_factor,
                                   uint16_t* __restrict__ value, int64_t n) {
    const float step = __fmul_rn(scalars[0], lr_factor), decay = scalars[1];
    for_each_index(n, [&](int64_t i) {
        const float x = x_f32 != nullptr ? x_f32[i] : bf16_bits_to_f32(x_bf16[i]);
        const float p = __fsub_rn(__fmul_rn(master[i], decay), __fmul_rn(step, x));
        master[i] = p;
        if (value != nullptr) value[i] = static_cast<uint16_t>(f32_to_bf16_bits(p));
    });
}

}  // namespace

void muon_momentum(const float* grad, const float* grad_scale, float* momentum, float mu,
                   float* update, int64_t n, CUstream_st* stream) {
    if (n <= 0) return;
    muon_momentum_kernel<<<grid_blocks(n), kThreads, 0, stream>>>(grad, grad_scale, momentum, mu,
                                                                  update, n);
    DF_CUDA_CHECK_LAUNCH(muon_momentum_kernel);
}

void muon_normalize(const float* x, const float* norm_sq, float eps, float* out_f32,
                    uint16_t* out_bf16, int64_t n, CUstream_st* stream) {
    if (n <= 0) return;
    muon_normalize_kernel<<<grid_blocks(n), kThreads, 0, stream>>>(x, norm_sq, eps, out_f32,
                                                                   out_bf16, n);
    DF_CUDA_CHECK_LAUNCH(muon_normalize_kernel);
}

void muon_update(float* master, const float* x_f32, const uint16_t* x_bf16, const float* scalars,
                 float lr_factor, uint16_t* value, int64_t n, CUstream_st* stream) {
    if (n <= 0) return;
    muon_update_kernel<<<grid_blocks(n), kThreads, 0, stream>>>(master, x_f32, x_bf16, scalars,
                                                                lr_factor, value, n);
    DF_CUDA_CHECK_LAUNCH(muon_update_kernel);
}

}  // namespace dflash::cuda::kernels

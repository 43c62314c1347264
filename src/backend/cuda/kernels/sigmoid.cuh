// The logistic sigmoid the CUDA kernels share (SwiGLU, the gating ops): explicitly rounded
// operations and precise expf, in the CPU reference's operation order, and never exp of a large
// positive number, so it cannot overflow to inf/inf. Covered by tests/cuda/swiglu_cuda_test.cpp
// and tests/cuda/gating_cuda_test.cpp.
#pragma once

namespace dflash::cuda::kernels {

__device__ __forceinline__ float sigmoid(float g) {
    if (g >= 0.0f) return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g)));
    const float e = expf(g);
    return __fdiv_rn(e, __fadd_rn(1.0f, e));
}

}  // namespace dflash::cuda::kernels

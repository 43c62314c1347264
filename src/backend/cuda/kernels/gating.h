// Raw launchers of the gating ops (see gating.cpp for the Tensor-level ops): bf16 element-wise,
// fp32 math. No fmt (Note [No fmt in .cu files]). Tested by tests/cuda/gating_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// y = x * sigmoid(gate) over n elements; y may alias x.
void sigmoid_mul(const uint16_t* x, const uint16_t* gate, uint16_t* y, int64_t n,
                 CUstream_st* stream);
// y[r, c] += sigmoid(s[r]) * x[r, c] over rows x cols; s f32 [rows].
void add_sigmoid_scaled(uint16_t* y, const uint16_t* x, const float* s, int64_t rows, int64_t cols,
                        CUstream_st* stream);

}  // namespace dflash::cuda::kernels

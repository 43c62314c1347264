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

// The backward of y = x * sigmoid(gate) over [rows, cols]: dx += dy * s, dgate = dy * x * s (1 - s)
// and, when sum is not null, sum[c] += the column sums of the f32 dgate values. The sums go through
// `partial` (f32 [sigmoid_mul_bwd_chunks(rows), cols], the caller's op workspace): one partial per
// chunk of rows, then the chunks in order, so the bits depend on the shape only.
int64_t sigmoid_mul_bwd_chunks(int64_t rows);
void sigmoid_mul_bwd(const uint16_t* dy, const uint16_t* x, const uint16_t* gate, uint16_t* dx,
                     uint16_t* dgate, float* partial, float* sum, int64_t rows, int64_t cols,
                     CUstream_st* stream);

}  // namespace dflash::cuda::kernels

// Raw launchers of the element-wise family (see elementwise.cpp for the Tensor-level ops).
// No fmt (Note [No fmt in .cu files]). Tested by tests/cuda/elementwise_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// y += alpha * x over n elements; y and x each f32 (`*_bf16` false) or bf16 (true). fp32 math,
// rounded as the CPU reference rounds (alpha * x, then the add).
void add_inplace(void* y, bool y_bf16, const void* x, bool x_bf16, float alpha, int64_t n,
                 CUstream_st* stream);
// y[i] += bias[i % cols] over n elements (a bias on every row), each f32 or bf16.
void add_row_bias(void* y, bool y_bf16, const void* bias, bool bias_bf16, int64_t cols, int64_t n,
                  CUstream_st* stream);
// y *= alpha over n elements, y f32 or bf16.
void scale_inplace(void* y, bool y_bf16, float alpha, int64_t n, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

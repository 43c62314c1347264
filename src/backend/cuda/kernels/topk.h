// Raw launcher of top-K over rows (see topk.cpp and backend.h: largest first, equal values by
// ascending index). No fmt (Note [No fmt in .cu files]). Tested by tests/cuda/topk_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

void topk_rows(const float* x, int64_t rows, int64_t vocab, int64_t k, float* values,
               int32_t* indices, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

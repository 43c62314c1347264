// Kernel launchers for elementwise.cu, called by elementwise.cpp after it has checked its inputs.
// See Note [No fmt in .cu files] in backend/cuda/cuda_check.h. Tested by
// tests/cuda/cuda_add_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::detail {

void launch_add_inplace(CUstream_st* stream, float* y, const float* x, int64_t n, float alpha);

}  // namespace dflash::cuda::detail

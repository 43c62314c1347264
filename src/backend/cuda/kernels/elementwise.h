// Element-wise CUDA kernels on a CudaDevice's stream. Tested by tests/cuda/cuda_add_test.cpp.
#pragma once

#include <cstdint>

#include "backend/cuda/device.h"

namespace dflash::cuda {

// y[i] = fma(alpha, x[i], y[i]) for i < n, on dev's stream (asynchronous). y and x are device
// pointers on dev; the calling thread must hold dev. Fused multiply-add, so the result is
// bit-identical to std::fma on the CPU.
void add_inplace(CudaDevice& dev, float* y, const float* x, int64_t n, float alpha);

}  // namespace dflash::cuda

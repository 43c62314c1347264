// Raw launcher of dpace_weights (no fmt: Note [No fmt in .cu files]). Tested by
// tests/cuda/dpace_weights_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda {

// out f32 [rows] = the D-PACE weights of `rows / block` blocks (see Backend::dpace_weights): one
// thread per block, scanning its slots in order in double, as the CPU reference does.
void dpace_weights_rows(const float* ce, const float* weights, int64_t rows, int64_t block,
                        float alpha, float* out, CUstream_st* stream);

}  // namespace dflash::cuda

// Raw launchers the GEMM engine needs beside cuBLASLt (no fmt: see Note [No fmt in .cu files]).
// Tested through tests/cuda/gemm_cuda_test.cpp (the K = 0 cases).
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda {

// c[i] *= beta for i < n, c f32 (c_bf16 false) or bf16 stored as uint16_t: C = beta * C, what a
// GEMM with K = 0 leaves. Elements are scaled in f32 and rounded to nearest even for bf16.
void scale_matrix(void* c, bool c_bf16, int64_t n, float beta, CUstream_st* stream);

}  // namespace dflash::cuda

// Raw launchers of the RMSNorm family (see rmsnorm.cpp for the Tensor-level ops): rows of `cols`
// bf16 values (the forward's weight bf16 or f32), fp32 math. No fmt (Note [No fmt in .cu files]).
// Tested by tests/cuda/rmsnorm_cuda_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels/rmsnorm_geometry.h"  // kRmsNormMaxCols

struct CUstream_st;

namespace dflash::cuda::kernels {

// y = w * (x * rstd), rstd = 1 / sqrt(mean(x^2) + eps) per row; rstd (may be null) receives it.
// w bf16, or f32 (the hybrid families' (1 + w) scales, which bf16 cannot hold exactly). pdl:
// launched with programmatic dependent launch (kernels/pdl.cuh).
void rmsnorm_fwd(const uint16_t* x, const uint16_t* w, float eps, uint16_t* y, float* rstd,
                 int64_t rows, int64_t cols, bool pdl, CUstream_st* stream);
void rmsnorm_fwd(const uint16_t* x, const float* w, float eps, uint16_t* y, float* rstd,
                 int64_t rows, int64_t cols, bool pdl, CUstream_st* stream);

// Device workspace bytes rmsnorm_bwd needs (the per-block partial sums of dw).
size_t rmsnorm_bwd_workspace_bytes(int64_t rows, int64_t cols);
// dx overwritten; dw (f32 [cols]) += sum over rows of dy * x * rstd, reduced in a fixed order
// (per-block partials in `workspace`, then one pass over them), so the bits repeat run to run.
void rmsnorm_bwd(const uint16_t* dy, const uint16_t* x, const uint16_t* w, const float* rstd,
                 uint16_t* dx, float* dw, int64_t rows, int64_t cols, void* workspace,
                 CUstream_st* stream);

}  // namespace dflash::cuda::kernels

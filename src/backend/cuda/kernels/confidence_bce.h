// Raw launcher of confidence_bce (see confidence_bce.cpp for the Tensor-level op; no fmt: Note [No
// fmt in .cu files]). Tested by tests/cuda/confidence_bce_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// One block over the rows (Backend::confidence_bce): z, dz bf16; tv, weights, grad_weights,
// loss_rows, dbias f32. grad_weights null: no gradient (dz and dbias null too); dbias may be null.
void confidence_bce(const uint16_t* z, const float* tv, const float* weights,
                    const float* grad_weights, float alpha, int64_t rows, float* loss_rows,
                    uint16_t* dz, float* dbias, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

// Raw launchers of DFlash2's selector pair scores (see selector_scores.cpp for the Tensor-level
// ops and backend.h for the semantics): z and codebooks bf16, ids i32, scores f32, fp32 math.
// No fmt (Note [No fmt in .cu files]). Tested by tests/cuda/selector_scores_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

struct SelectorShape {
    int64_t P, Kp, K, r, V;
};

// An id outside [0, V) gives NaN scores (the ids live on the device: they are not checked on the
// host) and is skipped by the backward.
void selector_scores_fwd(const uint16_t* z, const int32_t* pred, const int32_t* cand,
                         const uint16_t* a, const uint16_t* bc, float* out, const SelectorShape& s,
                         CUstream_st* stream);
// dz bf16 overwritten; da, dbc f32 accumulated.
void selector_scores_bwd(const float* dscores, const uint16_t* z, const int32_t* pred,
                         const int32_t* cand, const uint16_t* a, const uint16_t* bc, uint16_t* dz,
                         float* da, float* dbc, const SelectorShape& s, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

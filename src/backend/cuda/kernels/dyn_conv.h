// Raw launchers of DFlash2's grouped dynamic causal convolution (see dyn_conv.cpp for the
// Tensor-level ops and backend.h for the semantics): bf16 activations and weights, fp32 math.
// No fmt (Note [No fmt in .cu files]). Tested by tests/cuda/dyn_conv_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// The sizes of one call: R rows in blocks of bs, D channels, k taps, G groups of S channels;
// `half` picks base[half] and delta's columns [half*k*G, (half+1)*k*G).
struct DynConvShape {
    int64_t R, D, k, G, S, bs, half;
};

void dyn_conv_fwd(const uint16_t* x, const uint16_t* base, const uint16_t* delta, uint16_t* y,
                  const DynConvShape& s, CUstream_st* stream);
// dx overwritten (bf16), dbase f32 += (its half), ddelta bf16 overwritten (its half's columns).
void dyn_conv_bwd(const uint16_t* dy, const uint16_t* x, const uint16_t* base,
                  const uint16_t* delta, uint16_t* dx, float* dbase, uint16_t* ddelta,
                  const DynConvShape& s, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

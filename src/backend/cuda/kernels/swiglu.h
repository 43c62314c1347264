// Raw launchers of SwiGLU (see swiglu.cpp for the Tensor-level ops): bf16 element-wise, fp32 math.
// No fmt (Note [No fmt in .cu files]). Tested by tests/cuda/swiglu_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// out = silu(gate) * up over n elements.
void swiglu_fwd(const uint16_t* gate, const uint16_t* up, uint16_t* out, int64_t n,
                CUstream_st* stream);
// dup = dout * silu(gate); dgate = dout * up * silu'(gate). dgate / dup may alias dout.
void swiglu_bwd(const uint16_t* dout, const uint16_t* gate, const uint16_t* up, uint16_t* dgate,
                uint16_t* dup, int64_t n, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

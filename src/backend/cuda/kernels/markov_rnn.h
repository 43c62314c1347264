// Raw launchers of DSpark's rnn Markov head recurrence (see markov_rnn.cpp for the Tensor-level
// ops and backend/op_list.h for the semantics): bf16 pre/bias/j/out/dout/dact/s_prev, f32 act
// and dbias, fp32 math. No fmt (Note [No fmt in .cu files]). Tested by
// tests/cuda/markov_rnn_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// R rows in blocks of bs, rank r, j's row length C (>= r).
struct MarkovRnnShape {
    int64_t R, r, C, bs;
};

void markov_rnn_fwd(const uint16_t* pre, const uint16_t* bias, const uint16_t* j, float* act,
                    uint16_t* out, const MarkovRnnShape& s, CUstream_st* stream);
// dact and s_prev overwritten (bf16), dbias f32 += the column sums of dact.
void markov_rnn_bwd(const uint16_t* dout, const float* act, const uint16_t* j, uint16_t* dact,
                    float* dbias, uint16_t* s_prev, const MarkovRnnShape& s, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

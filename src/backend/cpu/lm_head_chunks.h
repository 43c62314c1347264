// The vocabulary-chunk GEMMs the chunked LM-head losses share (lm_head_ce.cpp, lm_head_kl.cpp):
// a chunk of logits, and the two gradient products of a chunk's logit gradient. Tested through
// tests/ops/lm_head_ce_test.cpp and tests/ops/lm_head_kl_test.cpp.
#pragma once

#include <cstdint>

#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

// logits[R, n] = h[R, D] · w[v0 : v0+n, D]ᵀ, the vocabulary rows split over the threads.
void lm_chunk_logits(const Exec& ex, const Tensor& h, const Tensor& w, int64_t v0, int64_t n,
                     float* logits);

// Given g[R, n], the gradient of the loss with respect to the chunk's logits: dh (overwritten on
// the first chunk v0 == 0, accumulated after) += g · w[v0 : v0+n] and dw[v0 : v0+n] += gᵀ · h,
// split over the columns of dh and the rows of dw. Empty dh / dw are skipped.
void lm_chunk_grads(const Exec& ex, const float* g, const Tensor& h, const Tensor& w, int64_t v0,
                    int64_t n, const Tensor& dh, const Tensor& dw);

}  // namespace dflash::cpu

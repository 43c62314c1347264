// Raw launchers of the LM head + cross-entropy's row kernels (no fmt: Note [No fmt in .cu files]).
// The GEMMs between them run through the GemmEngine (lm_head_ce.cpp). Tested by
// tests/cuda/lm_head_ce_cuda_test.cpp; index arithmetic by tests/ops/row_stats_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda {

// Per-row state in the workspace (see LmHeadCeLayout in row_stats.h).
struct LmRowArrays {
    float* row_max = nullptr;
    float* row_sum = nullptr;
    float* row_rest = nullptr;
    float* label_logit = nullptr;
    int32_t* row_arg = nullptr;
    float* lse = nullptr;
};

// One vocabulary chunk [v0, v0 + n) of the statistics pass, given its logits f32 [R, n]: merges the
// chunk into each row's running max / sum / argmax / label logit. With `probs` (bf16 [R, n],
// stored as uint16_t) it also writes exp(logit - new running max) with the label's column zeroed,
// and rescales the rows of dh_acc f32 [R, D] by exp(old max - new max) (the flash-style dh of
// lm_head_ce.cpp). On the last chunk it writes lse, and loss_rows / argmax when not null.
struct LmStatsArgs {
    const float* logits = nullptr;
    int64_t rows = 0, n = 0, v0 = 0;
    const int32_t* labels = nullptr;
    const float* weights = nullptr;
    LmRowArrays st;
    uint16_t* probs = nullptr;
    float* dh_acc = nullptr;
    int64_t dim = 0;
    bool first = false, last = false;
    float* loss_rows = nullptr;
    int32_t* argmax = nullptr;
};
void lm_stats_chunk(const LmStatsArgs& a, CUstream_st* stream);

// dh[r] = grad_scale * weights[r] / row_sum[r] * (acc[r] - row_rest[r] * w[labels[r]]) for f32 acc
// [R, D]; 0 for rows of weight 0. dh is f32 (may alias acc) or bf16 (dh_bf16 true, as uint16_t).
void lm_dh_finalize(const float* acc, const uint16_t* w, int64_t vocab, const int32_t* labels,
                    const float* weights, float grad_scale, const LmRowArrays& st, int64_t rows,
                    int64_t dim, void* dh, bool dh_bf16, CUstream_st* stream);

// g bf16 [R, n] = grad_scale * weights[r] * (exp(logit - lse[r]) - [v0 + c == labels[r]]) from the
// chunk's logits f32 [R, n]: what dw[v0 : v0 + n] += gᵀ · h needs.
void lm_grad_chunk(const float* logits, int64_t rows, int64_t n, int64_t v0, const int32_t* labels,
                   const float* weights, float grad_scale, const float* lse, uint16_t* g,
                   CUstream_st* stream);

}  // namespace dflash::cuda

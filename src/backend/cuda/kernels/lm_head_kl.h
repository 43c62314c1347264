// Raw launchers of the LM head + KL distillation's row kernels (no fmt: Note [No fmt in .cu
// files]). The GEMMs between them run through the GemmEngine (lm_head_kl.cpp). Tested by
// tests/cuda/lm_head_kl_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda {

// Per-row state in the workspace (lm_head_kl.cpp carves it): the online log-sum-exp of the draft
// logits d and of the teacher's t, the teacher-weighted cross term
// sum_v exp(t_v - t_max) (t_v - d_v), the draft's running argmax, and both lse at the end.
struct KlRowArrays {
    float* d_max = nullptr;
    float* d_sum = nullptr;
    float* t_max = nullptr;
    float* t_sum = nullptr;
    float* cross = nullptr;
    int32_t* d_arg = nullptr;
    float* lse_d = nullptr;
    float* lse_t = nullptr;
};

// One vocabulary chunk [v0, v0 + n) of the statistics pass, given both sides' logits f32 [R, n]:
// merges the chunk into each row's state. On the last chunk it writes lse_d / lse_t, and
// loss_rows (0 for rows of weight 0) / argmax when not null.
struct KlStatsArgs {
    const float* d = nullptr;
    const float* t = nullptr;
    int64_t rows = 0, n = 0, v0 = 0;
    const float* weights = nullptr;
    KlRowArrays st;
    bool first = false, last = false;
    float* loss_rows = nullptr;
    int32_t* argmax = nullptr;
};
void kl_stats_chunk(const KlStatsArgs& a, CUstream_st* stream);

// g bf16 [R, n] (as uint16_t) = grad_scale * weights[r] * (exp(d - lse_d[r]) - exp(t - lse_t[r]))
// from the chunk's logits f32 [R, n] of both sides: the chunk's gradient with respect to the draft
// logits, what dh += g · w_c and dw_c += gᵀ · h need.
void kl_grad_chunk(const float* d, const float* t, int64_t rows, int64_t n, const float* weights,
                   float grad_scale, const KlRowArrays& st, uint16_t* g, CUstream_st* stream);

}  // namespace dflash::cuda

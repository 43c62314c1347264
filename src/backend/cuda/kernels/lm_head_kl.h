// Raw launchers of the LM head + distribution losses' row kernels (no fmt: Note [No fmt in .cu
// files]). The GEMMs between them run through the GemmEngine (lm_head_kl.cpp). Tested by
// tests/cuda/lm_head_kl_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda {

// The weights of the divergences in a row's loss (LmHeadDivergences, without the backend header).
struct KlMix {
    float kl = 1.0f, rkl = 0.0f, jsd = 0.0f, tv = 0.0f;
    bool mixed_pass() const { return jsd != 0.0f || tv != 0.0f; }
};

// Per-row state in the workspace (lm_head_kl.cpp carves it), Note [Chunked divergences] in
// backend/cpu/lm_head_kl.cpp. Pass 1: the online log-sum-exp of the draft logits d and of the
// teacher's t, the cross sums C_p = sum_v exp(t_v - t_max) (t_v - d_v) and
// C_q = sum_v exp(d_v - d_max) (d_v - t_v), the draft's running argmax; after its last chunk both
// lse, KL(p || q) and KL(q || p). The mixed pass (JSD, TV): the sums of JSD, KL(q || m), TV and
// u = sum of q_v over the v with q_v > p_v.
struct KlRowArrays {
    float* d_max = nullptr;
    float* d_sum = nullptr;
    float* t_max = nullptr;
    float* t_sum = nullptr;
    float* cross_p = nullptr;
    float* cross_q = nullptr;
    int32_t* d_arg = nullptr;
    float* lse_d = nullptr;
    float* lse_t = nullptr;
    float* kl = nullptr;
    float* rkl = nullptr;
    float* jsd = nullptr;
    float* kl_qm = nullptr;
    float* tv = nullptr;
    float* u = nullptr;
};
constexpr int kKlRowArrayCount = 15;

// One vocabulary chunk [v0, v0 + n) of the statistics pass, given both sides' logits f32 [R, n]:
// merges the chunk into each row's state. On the last chunk it writes lse_d, lse_t, kl, rkl and
// argmax (when not null); loss_rows (0 for rows of weight 0) too unless the mix needs the mixed
// pass, which writes it instead.
struct KlStatsArgs {
    const float* d = nullptr;
    const float* t = nullptr;
    int64_t rows = 0, n = 0, v0 = 0;
    const float* weights = nullptr;
    KlMix mix;
    KlRowArrays st;
    bool first = false, last = false;
    float* loss_rows = nullptr;
    int32_t* argmax = nullptr;
};
void kl_stats_chunk(const KlStatsArgs& a, CUstream_st* stream);

// One chunk of the mixed pass (after the statistics pass): adds the chunk's JSD, KL(q || m), TV
// and u into each row's sums (overwriting them on the first chunk); on the last chunk writes
// loss_rows (when not null) from all the row's divergences. Same arguments as kl_stats_chunk
// (v0 and argmax unused).
void kl_mixed_chunk(const KlStatsArgs& a, CUstream_st* stream);

// g bf16 [R, n] (as uint16_t) = grad_scale * weights[r] * (the mix of the closed-form gradients
// with respect to the draft logits) from the chunk's logits f32 [R, n] of both sides: the chunk's
// gradient, what dh += g · w_c and dw_c += gᵀ · h need.
void kl_grad_chunk(const float* d, const float* t, int64_t rows, int64_t n, const float* weights,
                   float grad_scale, const KlMix& mix, const KlRowArrays& st, uint16_t* g,
                   CUstream_st* stream);

}  // namespace dflash::cuda

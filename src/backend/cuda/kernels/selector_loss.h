// Raw launchers of DFlash2's selector loss family (see selector_loss.cpp for the Tensor-level ops
// and backend.h for the semantics): ids and positions i32, scores and gradients f32, the LM head
// bf16; fp32 math. No fmt (Note [No fmt in .cu files]). Tested by
// tests/cuda/selector_loss_cuda_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// Labels outside [0, V) other than -1 leave the row's candidates alone (label_pos -1): the
// labels live on the device, so the host cannot check them.
void selector_inject(const float* logits, const int32_t* labels, float* values, int32_t* ids,
                     int32_t* label_pos, int32_t* hit, int64_t R, int64_t V, int64_t K,
                     CUstream_st* stream);

struct SelectorCeLaunch {
    const float* values;
    const float* pair;
    const int32_t* label_pos;
    const float* weights;
    const float* grad_weights;  // null: no gradient
    float multiplier, softcap;
    float* loss_rows;
    int32_t* pick;
    float* dvalues;
    float* dpair;
    int64_t R, K;
};
void selector_ce(const SelectorCeLaunch& a, CUstream_st* stream);

// One block: deterministic (double partials reduced by a fixed tree, integer counters).
// block <= kSelectorStatsMaxBlock.
constexpr int64_t kSelectorStatsMaxBlock = 1024;
void selector_stats(const float* loss_rows, const int32_t* pick, const int32_t* label_pos,
                    const int32_t* hit, const float* weights, int64_t R, int64_t block,
                    float* stats, CUstream_st* stream);

// out f32 [R, D] = sum_k dvalues[r, k] * w[ids[r, k]]; ids outside [0, V) are skipped.
void selector_unary_bwd(const float* dvalues, const int32_t* ids, const uint16_t* w, float* out,
                        int64_t R, int64_t K, int64_t V, int64_t D, CUstream_st* stream);

}  // namespace dflash::cuda::kernels

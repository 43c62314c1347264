// Index arithmetic and per-row statistics shared by the LM head + cross-entropy (lm_head_ce.cu) and
// argmax_rows (loss_stats.cu), as __host__ __device__ functions so the CPU test
// tests/ops/row_stats_test.cpp checks them exhaustively without a GPU: the workspace layout of
// lm_head_ce, its vocabulary chunk bounds, the argmax tie rule, the online log-sum-exp merge of
// one chunk into a row's running state, and the split bounds of the two-stage argmax.
// No fmt, no CUDA headers (Note [No fmt in .cu files]).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define DF_HD __host__ __device__ __forceinline__
#else
#define DF_HD inline
#endif

namespace dflash::cuda {

// ---- argmax: the larger value wins, the lower index on ties ------------------------------------
// (A NaN never wins, as in the CPU reference's `x > best`.) Commutative and associative, so any
// reduction tree gives the same answer.
DF_HD bool argmax_better(float v, int32_t i, float best_v, int32_t best_i) {
    return v > best_v || (v == best_v && i < best_i);
}

// ---- lm_head_ce: vocabulary chunks -------------------------------------------------------------
// Chunk c covers rows [c * step, c * step + n) of w, step = min(chunk, vocab).
DF_HD int64_t lm_step(int64_t vocab, int64_t chunk) {
    return chunk < vocab ? chunk : vocab;
}
DF_HD int64_t lm_chunk_count(int64_t vocab, int64_t step) {
    return step > 0 ? (vocab + step - 1) / step : 0;
}
DF_HD int64_t lm_chunk_begin(int64_t c, int64_t step) {
    return c * step;
}
DF_HD int64_t lm_chunk_size(int64_t c, int64_t vocab, int64_t step) {
    const int64_t left = vocab - c * step;
    return left < step ? left : step;
}

// ---- lm_head_ce: the workspace (f32 elements) ---------------------------------------------------
// logits f32 [R, step] | probs bf16 [R, step] (unnormalised softmax for dh, or g for dw) | six
// per-row arrays. Every part starts on a 256-byte boundary (64 f32) so the GEMMs see aligned
// operands.
struct LmHeadCeLayout {
    int64_t logits = 0;       // f32 [R, step]
    int64_t probs = 0;        // bf16 [R, step]
    int64_t row_max = 0;      // f32 [R] running max of the logits
    int64_t row_sum = 0;      // f32 [R] running sum of exp(logit - row_max)
    int64_t row_rest = 0;     // f32 [R] the same sum without the label's term (bf16-rounded terms)
    int64_t label_logit = 0;  // f32 [R]
    int64_t row_arg = 0;      // i32 [R] running argmax
    int64_t lse = 0;          // f32 [R] log-sum-exp, after the last chunk
    int64_t total = 0;
};

DF_HD int64_t lm_align64(int64_t n) {
    return (n + 63) / 64 * 64;
}

DF_HD LmHeadCeLayout lm_head_ce_layout(int64_t rows, int64_t vocab, int64_t chunk) {
    const int64_t step = lm_step(vocab, chunk);
    LmHeadCeLayout l;
    int64_t at = 0;
    l.logits = at;
    at += lm_align64(rows * step);
    l.probs = at;
    at += lm_align64((rows * step + 1) / 2);
    int64_t* rows_arrays[] = {&l.row_max,     &l.row_sum, &l.row_rest,
                              &l.label_logit, &l.row_arg, &l.lse};
    for (int64_t* p : rows_arrays) {
        *p = at;
        at += lm_align64(rows);
    }
    l.total = at;
    return l;
}

// ---- lm_head_ce: one row's running state over the chunks ---------------------------------------
// The chunk's statistics are taken relative to the new running max m_new = max(old max, chunk
// max), so merging rescales only the old sums: sum = sum * exp(old_max - m_new) + chunk_sum.
struct LmRowState {
    float max;
    float sum;
    float rest;
    int32_t arg;
};

// The factor the old sums (and the dh accumulator of the flash-style pass) are multiplied by;
// 0 on the first chunk (nothing to keep), exactly 1 when the max did not grow.
DF_HD float lm_rescale(bool first, float old_max, float new_max) {
    if (first) return 0.0f;
    return old_max == new_max ? 1.0f : expf(old_max - new_max);
}

// Chunk max/argmax (lowest index of the chunk's max) and sums relative to new_max, merged in
// chunk order: an earlier chunk keeps the argmax on ties (its indices are lower).
DF_HD LmRowState lm_merge_chunk(const LmRowState& old, bool first, float chunk_max,
                                int32_t chunk_arg, float new_max, float chunk_sum,
                                float chunk_rest) {
    const float a = lm_rescale(first, old.max, new_max);
    LmRowState s;
    s.max = new_max;
    s.sum = first ? chunk_sum : old.sum * a + chunk_sum;
    s.rest = first ? chunk_rest : old.rest * a + chunk_rest;
    s.arg = (first || chunk_max > old.max) ? chunk_arg : old.arg;
    return s;
}

// ---- argmax_rows: two-stage split of each row --------------------------------------------------
// Stage 1 gives each of `splits` blocks per row the columns [s * span, min((s + 1) * span, V)).
// span is a multiple of 4 * threads so each block's part is whole float4 loads when V % 4 == 0.
struct ArgmaxSplit {
    int64_t span = 0;
    int64_t splits = 0;
};

DF_HD ArgmaxSplit argmax_split(int64_t rows, int64_t vocab, int64_t sm_count, int64_t threads) {
    ArgmaxSplit s;
    const int64_t unit = 4 * threads;
    // About two blocks per SM in all, at least one unit of columns per block.
    const int64_t want_blocks = 2 * (sm_count > 0 ? sm_count : 1);
    int64_t per_row = (want_blocks + rows - 1) / (rows > 0 ? rows : 1);
    const int64_t max_splits = (vocab + unit - 1) / unit;
    if (per_row > max_splits) per_row = max_splits;
    if (per_row < 1) per_row = 1;
    const int64_t cols = (vocab + per_row - 1) / per_row;
    s.span = (cols + unit - 1) / unit * unit;
    s.splits = s.span > 0 ? (vocab + s.span - 1) / s.span : 1;
    if (s.splits < 1) s.splits = 1;
    return s;
}

}  // namespace dflash::cuda

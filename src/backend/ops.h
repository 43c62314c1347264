// The op set (docs/design.md "The op contract"): the plain data types every backend's ops share.
// The CPU reference lives in backend/cpu/, one op family per file; backend/op_list.h lists the ops.
// Tested by tests/ops/attention_test.cpp (AttnMask), tests/ops/lm_head_ce_test.cpp
// (LmHeadCeOut), tests/ops/lm_head_kl_test.cpp (LmHeadKlOut) and tests/ops/moe_test.cpp (the
// mixture-of-experts structs).
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace dflash {

// ---- RoPE (NeoX rotate-half) -----------------------------------------------------------------
// yarn: the frequencies are made by the model (model/rope_yarn.h), not by rope_inv_freq.
enum class RopeScalingType { none, linear, llama3, yarn };

struct RopeScaling {
    RopeScalingType type = RopeScalingType::none;
    double factor = 1.0;                   // linear, llama3 and yarn
    double low_freq_factor = 1.0;          // llama3
    double high_freq_factor = 4.0;         // llama3
    int64_t original_max_position = 8192;  // llama3, yarn: original_max_position_embeddings
    double beta_fast = 32.0;               // yarn: rotations where extrapolation ends
    double beta_slow = 1.0;                // yarn: rotations where interpolation starts
    bool truncate = true;                  // yarn: round the correction range to whole dims
    double attention_factor = 0.0;         // yarn: cos/sin scale; 0 = 0.1 ln(factor) + 1
};

struct RopeConfig {
    double theta = 1000000.0;
    RopeScaling scaling;
};

// ---- Attention masks -------------------------------------------------------------------------
enum class AttnMaskKind {
    causal,        // query i sits at absolute position q_offset + i and sees keys j <= q_offset + i
    full,          // every query sees every key (drafter inference: context cache + block)
    dflash_block,  // DFlash training mask (docs/training.md), see AttnMask
};

// For dflash_block the keys are [ctx_len context rows ; Sq block rows] and queries are the Sq block
// rows, Sq = N * block_size. A query in block n sees context keys j < anchors[n] (strictly: the
// anchor's own feature is not visible) and every key of its own block n (bidirectional). A block
// with anchors[n] < 0 is padding: it sees nothing, its output and gradients are 0.
// With ctx_start (i32 [N], may be empty = all 0) block n sees only context keys
// ctx_start[n] <= j < anchors[n]: in a packed training sequence, its own document's rows.
// Decoding over a KV cache passes the whole cache as k/v and its length in device memory
// (`kv_len`, i32 [1]): only keys j < kv_len[0] exist, and a causal query i sits at position
// kv_len[0] - Sq + i. One captured graph then serves every cache length.
// Sliding-window drafter layers (docs/training.md "Sliding-window drafter layers") give
// dflash_block a window W and a causal flag. The query of block n at slot k sits at absolute
// position a + k (a = anchors[n]); with W > 0 it sees context keys j >= a + k - (W - 1) (and
// still j < a, j >= ctx_start) and own-block keys of slot s with |k - s| < W; with causal_block
// only slots s <= k. That is what decoding the block over its cache sees with a causal window of
// W keys (or, not causal, a window of W keys on both sides), so training sees the keys serving
// does.
// Two additions serve targets such as gpt-oss (docs/engine.md "Attention masks"): a causal
// sliding window (`window`) and per-head sink logits (`sinks`). With sinks the lse output is
// log(sum_j exp(x_ij) + exp(s_h)), so exp(x_ij - lse) is still the probability of key j; a row
// that sees no key then has out 0 and lse s_h. Sinks are forward-only (targets are frozen):
// attention_bwd refuses them.
struct AttnMask {
    AttnMaskKind kind = AttnMaskKind::causal;
    int64_t q_offset = 0;    // causal without kv_len
    int64_t ctx_len = 0;     // dflash_block
    int64_t block_size = 0;  // dflash_block
    Tensor anchors;          // dflash_block: i32 [N] on the op's device
    Tensor ctx_start;        // dflash_block: i32 [N] on the op's device, or empty (all 0)
    Tensor kv_len;           // causal / full over a cache: i32 [1] on the op's device, or empty
    int64_t window = 0;  // causal kinds (also over a cache): a query at position p sees keys j with
                         // p - window < j <= p (window keys incl. itself); 0 = no window.
                         // dflash_block: the drafter window above.
    bool causal_block = false;  // dflash_block: slot k sees own-block slots <= k only
    Tensor sinks;  // f32 [H] on the op's device, or empty: per-head logit s_h that joins each
                   // softmax denominator only: p_ij = exp(x_ij) / (sum_j exp(x_ij) + exp(s_h))
                   // (x = scaled scores; subtract the max over {x, s_h} for stability)

    static AttnMask causal(int64_t q_offset = 0) {
        AttnMask m;
        m.q_offset = q_offset;
        return m;
    }
    static AttnMask full() {
        AttnMask m;
        m.kind = AttnMaskKind::full;
        return m;
    }
    static AttnMask over_cache(AttnMaskKind kind, const Tensor& kv_len) {
        AttnMask m;
        m.kind = kind;
        m.kv_len = kv_len;
        return m;
    }
    static AttnMask dflash_block(int64_t ctx_len, int64_t block_size, const Tensor& anchors,
                                 const Tensor& ctx_start = Tensor()) {
        AttnMask m;
        m.kind = AttnMaskKind::dflash_block;
        m.ctx_len = ctx_len;
        m.block_size = block_size;
        m.anchors = anchors;
        m.ctx_start = ctx_start;
        return m;
    }
    // This mask with a sliding window of `w` keys (causal and dflash_block; 0: none).
    AttnMask with_window(int64_t w) const {
        AttnMask m = *this;
        m.window = w;
        return m;
    }
    // dflash_block with causal blocks (a sliding drafter layer's, or a causal DFlash2 layer's).
    AttnMask with_causal_block(bool c = true) const {
        AttnMask m = *this;
        m.causal_block = c;
        return m;
    }
    // This mask with per-head sink logits (f32 [H]; empty: none).
    AttnMask with_sinks(const Tensor& s) const {
        AttnMask m = *this;
        m.sinks = s;
        return m;
    }
};

// ---- Optimiser -------------------------------------------------------------------------------
struct AdamWParams {
    float lr = 1e-3f;
    float beta1 = 0.9f;
    float beta2 = 0.999f;
    float eps = 1e-8f;
    float weight_decay = 0.0f;
    int64_t step = 1;  // 1-based, for bias correction
    // Optional f32 [3] on the op's device holding adamw_step_scalars() of this step: then lr and
    // step are not read, so one recorded update (Backend::run_step) serves every step.
    Tensor scalars;
};

// The per-step scalars of AdamW: decay = 1 - lr*wd, step_size = lr / (1 - b1^t) and
// bc2_sqrt = sqrt(1 - b2^t), in double as torch computes them, then rounded to f32.
struct AdamWStepScalars {
    float decay = 1, step_size = 0, bc2_sqrt = 1;
};
AdamWStepScalars adamw_step_scalars(const AdamWParams& p);

// ---- Sampling ---------------------------------------------------------------------------------
// What tokens are sampled from (backend/sampling.h): softmax(logits / temperature), the top_k most
// likely tokens (0: all), then the top_p nucleus (1: off). The one sampling struct of the project:
// Backend::sample_rows draws with it on the device and the decoding engine computes the same
// distribution with it on the host (infer/sampler.h). Its fields are floats because the device
// kernel computes in floats: the host's acceptance probabilities must use the very temperature and
// top_p the device drew with, so the settings' doubles are rounded to float once, where the
// struct is filled from them (generate_options_from_settings), and never again.
struct SampleParams {
    float temperature = 0.0f;  // 0: greedy (argmax; callers do not call sample_rows then), else > 0
    int64_t top_k = 0;
    float top_p = 1.0f;
    bool greedy() const { return temperature <= 0.0f; }
};

// ---- LM head + cross-entropy ------------------------------------------------------------------
// Outputs of lm_head_ce. Tensors left empty are not computed.
struct LmHeadCeOut {
    Tensor loss_rows;  // f32 [R]: unweighted CE per row (0 where weight == 0)
    Tensor argmax;     // i32 [R]: argmax of the logits row (lowest index on ties)
    Tensor dh;  // [R, D] (f32 or the compute dtype): overwritten with grad_scale * d(sum_r w_r
                // CE_r)/dh
    Tensor dw;  // f32 [V, D]: accumulated (+=) with grad_scale * d(sum_r w_r CE_r)/dW
    // f32 [Backend::lm_head_ce_workspace(R, D, V, chunk)]: per-chunk logits, row statistics and
    // (CUDA) the dh accumulator.
    Tensor workspace;
};

// ---- LM head + distribution losses ------------------------------------------------------------
// Which distances between the teacher's p and the draft's q lm_head_kl computes, each with its
// weight in a row's loss (docs/training.md "Distribution losses"); 0 leaves a term out. The row's
// loss is kl * KL(p || q) + rkl * KL(q || p) + jsd * JSD(p, q) + tv * TV(p, q) (an L1 distance is
// tv with twice the weight). The default is forward KL alone.
struct LmHeadDivergences {
    float kl = 1.0f;   // sum_v p_v log(p_v / q_v)
    float rkl = 0.0f;  // sum_v q_v log(q_v / p_v)
    float jsd = 0.0f;  // (KL(p || m) + KL(q || m)) / 2, m = (p + q) / 2
    float tv = 0.0f;   // sum_v |p_v - q_v| / 2
    // jsd and tv need both normalisers before a row's loss can be summed: one more pass over the
    // vocabulary than kl and rkl.
    bool needs_mixed_pass() const { return jsd != 0.0f || tv != 0.0f; }
};

// Outputs of lm_head_kl. Tensors left empty are not computed.
struct LmHeadKlOut {
    Tensor
        loss_rows;  // f32 [R]: the unweighted (by row) divergence mix per row (0 where weight == 0)
    Tensor argmax;  // i32 [R]: argmax of the draft logits h · Wᵀ (lowest index on ties)
    Tensor dh;      // [R, D] (f32 or the compute dtype): overwritten with grad_scale * d(sum_r w_r
                    // loss_r)/dh
    // f32 [V, D]: accumulated (+=) with grad_scale * d(sum_r w_r loss_r)/dW through the draft
    // logits only: the teacher's distribution is a constant (a frozen target), even when W is
    // shared.
    Tensor dw;
    // f32 [Backend::lm_head_kl_workspace(R, D, V, chunk)]: per-chunk logits of both sides, row
    // statistics and (CUDA) the dh accumulator.
    Tensor workspace;
};

// ---- DFlash2 selector loss ---------------------------------------------------------------------
// Arguments of Backend::selector_ce (docs/training.md "The selector's loss"): R rows (drafted
// slots), K candidates. Tensors left empty are not computed (grad_weights empty: no gradient).
struct SelectorCeArgs {
    Tensor values;        // f32 [R, K]: the candidates' raw logits (topk_rows, selector_inject)
    Tensor pair;          // f32 [R, K]: pair scores of the slot's one predecessor to each candidate
    Tensor label_pos;     // i32 [R]: the target's candidate index, -1 for rows that are not trained
    Tensor weights;       // f32 [R]: loss weights (0: not trained)
    Tensor grad_weights;  // f32 [R]: the gradient's row weights (weights x the step's scale)
    float multiplier = 1.0f;  // output_multiplier (> 0)
    float softcap = 0.0f;     // final_logit_softcapping (<= 0: off)
    Tensor loss_rows;         // out f32 [R]: -log softmax(S)[label] (0 where weights == 0)
    Tensor pick;              // out i32 [R]: argmax of S (lowest index on ties)
    Tensor dvalues;  // out f32 [R, K]: grad_weights * d CE / d values (through the soft cap)
    Tensor dpair;    // out f32 [R, K]: grad_weights * d CE / d pair = (softmax(S) - onehot)
};

// Indices into the stats that Backend::selector_stats accumulates, for blocks of `block` rows.
// Counts are over rows (or blocks) that carry loss weight.
struct SelectorStatsLayout {
    int64_t block = 1;
    static constexpr int64_t kLossSum = 0;    // sum of weight * selector CE
    static constexpr int64_t kRows = 1;       // rows with weight > 0
    static constexpr int64_t kHits = 2;       // ... whose target is in the strict top-K (recall)
    static constexpr int64_t kPicks = 3;      // ... where the teacher-forced argmax is the target
    static constexpr int64_t kBlocks = 4;     // blocks with weight at row 1
    static constexpr int64_t kPathRun = 5;    // sum over blocks of the self-conditioned alive run
    static constexpr int64_t kOracleRun = 6;  // sum over blocks of the run while target in top-K
    // Per block row k: blocks whose path was alive before row k (and row k is trained), and those
    // of them whose path picks the target at k.
    int64_t path_count(int64_t k) const { return 7 + k; }
    int64_t path_correct(int64_t k) const { return 7 + block + k; }
    int64_t size() const { return 7 + 2 * block; }
};

// ---- The decode block's products (Backend::rows_linear) -------------------------------------
enum class RowsEpilogue {
    store,   // y = x · [W_0; W_1; W_2]ᵀ, the weights' outputs side by side
    add,     // y = residual + x · W_0ᵀ
    swiglu,  // y = silu(x · W_0ᵀ) * (x · W_1ᵀ)
};
// The most rows rows_linear takes: a verify block (a DFlash block is at most 16 tokens).
constexpr int64_t kRowsLinearMaxRows = 16;
struct RowsLinear {
    Tensor w[3];  // [N_i, K] each in x's dtype; w[1], w[2] empty when unused
    RowsEpilogue epilogue = RowsEpilogue::store;
};

// ---- Mixture of experts -------------------------------------------------------------------------
// The router and expert MLPs of a sparse MoE block (Backend::moe_route, Backend::moe_experts).
enum class MoeRouterKind {
    // Qwen3-MoE: p = softmax(logits) over all E in fp32, the k largest p and, when `normalize`,
    // each divided by their sum.
    softmax_topk,
    // gpt-oss: the k largest logits; weights = softmax over those k only (`normalize` unused:
    // they sum to 1 already).
    topk_softmax,
};
struct MoeRouting {
    MoeRouterKind kind = MoeRouterKind::softmax_topk;
    int64_t k = 1;  // experts per token, 1 <= k <= E
    bool normalize = true;
};
enum class MoeActivation {
    swiglu,  // a = silu(g) * u
    // gpt-oss: g = min(g, limit); u = clamp(u, -limit, limit); a = (u + 1) * g * sigmoid(alpha * g)
    clamped_swiglu,
};
// The experts' weights, E experts of hidden size D and intermediate size I, in the Linear
// orientation (y = x · Wᵀ). A checkpoint that stores them otherwise (gpt-oss's [E, D, 2I] with
// interleaved gate/up rows) is rearranged into this layout when it is loaded.
//
// The two matrices come either in x's dtype (gate_up, down) or as MXFP4 (backend/mxfp4.h), the
// same rows in the same order, each row's D (or I) values as groups of 32: blocks u8
// [.., groups, 16] (two e2m1 codes a byte, the low nibble first) and scales u8 [.., groups] (e8m0:
// 2^(s - 127)). Then gate_up and down stay empty and the op decodes the weights as it reads them,
// computing exactly what it computes on the decoded weights (D and I multiples of 32). gpt-oss
// experts stay MXFP4 in GPU memory so (a quarter of bf16's bytes).
struct MoeExperts {
    Tensor gate_up;       // [E, 2I, D]: rows [0, I) the gate projection, [I, 2I) the up projection
    Tensor gate_up_bias;  // [E, 2I] or empty (gpt-oss has biases, Qwen3-MoE none)
    Tensor down;          // [E, D, I]
    Tensor down_bias;     // [E, D] or empty
    Tensor gate_up_blocks;  // MXFP4 gate_up: u8 [E, 2I, D/32, 16], or empty
    Tensor gate_up_scales;  // u8 [E, 2I, D/32]
    Tensor down_blocks;     // MXFP4 down: u8 [E, D, I/32, 16]
    Tensor down_scales;     // u8 [E, D, I/32]
    bool mxfp4() const { return !gate_up_blocks.empty(); }
    MoeActivation activation = MoeActivation::swiglu;
    float limit = 7.0f;    // clamped_swiglu
    float alpha = 1.702f;  // clamped_swiglu
};

}  // namespace dflash

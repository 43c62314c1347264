// The DFlash drafter (docs/formats.md "DFlash drafter directory"): fc over K concatenated target
// features, hidden_norm, N decoder layers with KV injection and non-causal attention, final norm,
// and the target's frozen embedding and LM head (passed in, never owned). Training forward/backward
// over a packed sequence with N anchors and the block-sparse mask (docs/training.md "The drafter's
// training forward"), and an inference session whose context KV cache keeps only committed context
// rows (docs/speculative-sampling.md "The decoding step"). Tested by tests/model/drafter_test.cpp.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "model/block_loss.h"
#include "model/decoder_layer.h"
#include "model/dflash2_layer.h"
#include "model/dspark_heads.h"
#include "model/hf_config.h"
#include "model/params.h"

namespace dflash {

// Decay weight of block position k >= 1: exp(-(k-1)/gamma); gamma <= 0 means uniform weights.
float dflash_position_weight(int64_t k, double gamma);

// What a training step optimises beyond the default (cross-entropy, the whole packed sequence as
// context): train.loss and train.documents.
struct BlockObjective {
    LossMix loss;
    // Losses with a teacher term (LossMix::needs_teacher): the target's final-normed hidden states
    // [S, D] of the sequence (device); block row k of the block anchored at a learns the target's
    // distribution at position a + k - 1.
    Tensor teacher_hidden;
    // Per anchor, the first context row its block may see (its document's start in a packed
    // sequence); empty: every block sees the context from row 0.
    std::span<const int32_t> context_starts;
    // DFlash2 drafters: where the candidate selector's loss and metrics go (f32
    // [SelectorStatsLayout{B}.size()], device; model/selector_loss.h), and the selector loss's
    // weight in the gradient (train.selector_loss_alpha; 0: metrics only). Empty: no selector loss.
    Tensor selector_stats;
    double selector_alpha = 0;
    // DSpark drafters: the weights of the CE, L1 and confidence terms (train.dspark_*_alpha;
    // the teacher_hidden above is then required whatever `loss` says).
    DsparkLossWeights dspark;
    // Evaluation (optional, device; BlockLossArgs::argmax_out / tv_out): each block row's argmax
    // (i32 [N*B]) and, with teacher_hidden given whatever the loss, its TV distance from the
    // target's distribution (f32 [N*B]).
    Tensor eval_argmax;
    Tensor eval_tv;
    // DSpark with a confidence head: f32 [R], each row's confidence logit (eval metrics).
    Tensor eval_conf;
};

// DrafterModel::train_step's arguments, by lifetime. One packed training sequence:
struct DrafterBatch {
    Tensor features;                     // [S, K*D] (device): the target's target_layer_ids outputs
    std::span<const int32_t> tokens;     // [S]
    std::span<const uint8_t> loss_mask;  // [S]
    std::span<const int32_t> anchors;    // sorted, each < S
    // train.hidden_noise (docs/training.md "Hidden-state noise"): the seed of the uniform noise
    // train_step adds into `features` in place (one per sample, drawn from the run's seed).
    uint64_t noise_seed = 0;
};

// The run's, the same for every step: the frozen target's tensors the drafter shares and how the
// block loss is weighed and chunked.
struct DrafterLossSpec {
    Tensor embed;             // the target's token embedding [V, D] (device)
    Tensor lm_head;           // the target's LM head [V, D] (device)
    double gamma = 7.0;       // block position k weighs exp(-(k-1)/gamma)
    int64_t ce_chunk = 8192;  // vocabulary rows per chunk of the fused CE / KL
    // > 0: D-PACE weighting with this alpha instead of the decay (gamma is then unused: the
    // weights known before the forward are the loss mask, what weight_sum with gamma 0 counts).
    double dpace_alpha = 0;
    // > 0: U(-hidden_noise, hidden_noise) added to the features (train.hidden_noise); never to
    // the teacher's hidden states.
    double hidden_noise = 0;
    // train.recompute_layers: keep only each draft layer's input through the forward and run the
    // layer's forward again in the backward (the same ops on the same inputs: the same bits).
    bool recompute_layers = false;
};

// The call's: its share of the step's gradient and where its sums go.
struct DrafterStepSums {
    float grad_scale = 1.0f;  // the gradient accumulated is grad_scale * d(sum w CE)
    Tensor stats;             // f32 [LossStatsLayout{B}.size()] (device), added into
};

class DrafterModel {
  public:
    DrafterModel(Backend& be, DrafterConfig cfg);  // zero weights on be's device
    static DrafterModel load(Backend& be, const std::filesystem::path& dir);
    // Random weights (randomize).
    static DrafterModel random(Backend& be, DrafterConfig cfg, uint64_t seed, float std = 0.02f);
    // Overwrites every weight on the device: ParamSet::init_random, and a DFlash2 drafter's new
    // modules as init_dflash2_modules sets them. The same weights on every backend.
    void randomize(uint64_t seed, float std = 0.02f);
    // A DFlash2 drafter with the DFlash drafter `v1`'s backbone (every tensor of v1, copied) and
    // neutral new modules (init_dflash2_modules): it drafts exactly what v1 drafts. cfg must be
    // v1's config with arch dflash2 (the conv/selector keys may be anything valid). With arch
    // dspark: the DSpark warm start (docs/training.md "DSpark drafters"), v1's backbone and
    // fresh heads (init_dspark_heads).
    static DrafterModel from_dflash(Backend& be, const DrafterModel& v1, DrafterConfig cfg,
                                    uint64_t seed, float std = 0.02f);
    // DFlash2 only. Identity convolutions (base_kernel tap 0 = 1, other taps 0, kernel
    // projections 0: both convs pass their input through exactly) and a neutral selector
    // (successor_codebook 0, so every pair score is 0 and the walk follows the unary scores; the
    // predecessor codebook and hidden projection N(0, std^2) so that training moves them).
    void init_dflash2_modules(uint64_t seed, float std = 0.02f);
    // DSpark only: the Markov and confidence heads' weights N(0, std^2), their biases 0 (the
    // HF default init of a new module).
    void init_dspark_heads(uint64_t seed, float std = 0.02f);
    void save(const std::filesystem::path& dir, DType store_as = DType::bf16) const;

    const DrafterConfig& config() const { return cfg_; }
    const LayerDims& dims() const { return dims_; }
    const Tensor& inv_freq() const { return inv_freq_view_; }  // f32 [Dh/2] on the device
    int64_t block_size() const { return cfg_.block_size; }
    int64_t feature_dim() const;  // K * D
    ParamSet& params() { return params_; }
    const ParamSet& params() const { return params_; }
    Backend& backend() const { return params_.backend(); }
    const LayerWeights& layer(int64_t i) const { return layers_[i]; }
    const Dflash2LayerWeights& conv(int64_t i) const { return convs_[i]; }  // DFlash2 only

    // Context features: ctx [T, D] = hidden_norm(features [T, K*D] · fcᵀ). pre [T, D] and rstd [T]
    // receive the intermediate values when non-empty (training).
    // fc's product goes through its copy in `prepared` when there is one (drafting).
    void project_context(Backend& be, const Tensor& features, const Tensor& ctx, const Tensor& pre,
                         const Tensor& rstd, const PreparedWeights* prepared = nullptr) const;
    // The weights drafting multiplies as x · Wᵀ: fc, every layer's projections and (DFlash2) the
    // convolutions' kernel projections and the selector's hidden projection; the LM head, the
    // target's, is not among them.
    std::vector<Tensor> linear_weights() const;

    // Sum of decay weights of one sequence's blocks (what the loss is normalised by), computable
    // before the forward so the trainer can normalise across micro-batches and workers.
    double weight_sum(std::span<const uint8_t> loss_mask, std::span<const int32_t> anchors,
                      double gamma) const;

    // One packed sequence (batch). Blocks are [token a_j, MASK x (B-1)] at positions
    // a_j..a_j+B-1; block position k is trained to predict tokens[a_j + k] (k = 0 excluded) with
    // weight loss_mask * exp(-(k-1)/loss.gamma). Adds the loss and per-position accuracy into
    // step.stats (position = k). When params have gradients, accumulates
    // step.grad_scale * d(sum w CE)/dparams. Memory from ws. `objective` picks KL distillation
    // instead of CE, per-block context starts and (DFlash2) the selector's loss.
    void train_step(Backend& be, Workspace& ws, const DrafterBatch& batch,
                    const DrafterLossSpec& loss, const DrafterStepSums& step,
                    const BlockObjective& objective = {});

    // The training-path forward alone: final-normed hidden states hf [N*B, D] of every block row
    // (logits = hf · lm_headᵀ). Ties the training and inference paths together in tests.
    void block_hidden(Backend& be, Workspace& ws, const Tensor& embed, const Tensor& features,
                      std::span<const int32_t> tokens, std::span<const int32_t> anchors,
                      const Tensor& hf, std::span<const int32_t> context_starts = {}) const;

  private:
    struct BlockForward;  // the activations of one training forward
    void forward_blocks(Backend& be, Workspace& ws, const Tensor& embed, const Tensor& features,
                        std::span<const int32_t> tokens, std::span<const int32_t> anchors,
                        std::span<const int32_t> context_starts, BlockForward& f) const;
    // Layer l's training forward from f.xs[l] into f.xs[l + 1], its activations into f.
    void forward_layer(const LayerContext& lc, BlockForward& f, int64_t l) const;

    DrafterConfig cfg_;
    LayerDims dims_;
    ParamSet params_;
    DeviceTensor inv_freq_;
    Tensor inv_freq_view_;
    // Views into params_, resolved once: every forward (each decode step too) uses them, and the
    // parameters' storage never moves.
    std::vector<LayerWeights> layers_;
    std::vector<Dflash2LayerWeights> convs_;  // DFlash2 only
};

// Inference state of one request: per-layer K/V of committed context rows only; a sliding-window
// layer keeps a bounded window of them (Note [Bounded draft KV] in drafter.cpp).
class DrafterSession {
  public:
    // capacity: context rows; max_block: the largest block drafted (0 = the drafter's block size);
    // max_new_rows: the most context rows one draft() appends (0 = max_block). prepared: copies
    // of model.linear_weights() and of lm_head to multiply with (may be null; owned by the
    // caller, who keeps it alive and current while the session lives).
    DrafterSession(const DrafterModel& model, Backend& be, const Tensor& embed,
                   const Tensor& lm_head, int64_t capacity, int64_t max_block = 0,
                   int64_t max_new_rows = 0, const PreparedWeights* prepared = nullptr);
    int64_t context_length() const { return ctx_len_; }
    // K (and V) rows layer l's cache holds: capacity + max_block, or for a sliding-window layer
    // 2(W-1) + min(max_new_rows, max(W, max_block)) + max_block when that is fewer (Note
    // [Bounded draft KV]).
    int64_t cache_rows(int64_t l) const { return cache_[static_cast<size_t>(l)].k.view().dim(0); }

    // Appends the features [T, K*D] (device) of newly committed tokens at positions
    // context_length()..context_length()+T-1 to the context, then drafts the block
    // [anchor, MASK x (B-1)] at positions context_length()..+B-1 (after the append) and writes the
    // logits of block positions 1..B-1 into logits [B-1, V] (device, f32); a DSpark drafter's
    // of every position 0..B-1 (the LM head's U_k, before the Markov bias) into logits [B, V]. The
    // block's own K/V are not kept. block_size 0 means the drafter's own. More than max_new_rows
    // features are appended in pieces.
    void draft(const Tensor& new_features, int32_t anchor, const Tensor& logits,
               int64_t block_size = 0);
    // Forgets context rows >= len.
    void crop(int64_t len);
    // DFlash2: z [B-1, r] = hidden_projection of block rows 1..B-1 of the last draft (the
    // selector's input, candidate_selector.h); empty for DFlash drafters.
    Tensor selector_z(int64_t block_size) const;
    // DSpark: h [B, D], the final-normed hidden states of every row of the last draft (the
    // heads' input, dspark_heads.h); empty for other drafters.
    Tensor dspark_hidden(int64_t block_size) const;

  private:
    // Appends T <= max_new_rows context rows and, when B > 0, drafts a block after them.
    void run(Backend& be, Workspace& ws, const Tensor& new_features, int64_t start, int32_t anchor,
             int64_t B, const Tensor& logits);
    // Whether a sliding-window layer hides keys of a cache of n rows (then a draft step depends
    // on n and runs eagerly).
    bool window_hides_keys(int64_t n) const;

    const DrafterModel& model_;
    Backend& be_;
    StepOwner owner_;         // this session's recorded steps (its caches and workspace stay put)
    Tensor embed_, lm_head_;  // [V, D], [V, D]: the target's, frozen
    int64_t capacity_;
    int64_t max_block_;
    int64_t max_new_rows_;
    const PreparedWeights* prepared_;
    // Note [Bounded draft KV]: sliding-window layers keep only window_rows_ cache rows; their
    // row 0 holds absolute context position window_offset_.
    void slide_window_caches(int64_t T, int64_t B);
    int64_t window_ = 0;        // the sliding layers' window W (0: no sliding layer)
    int64_t window_rows_ = 0;   // rows of a sliding layer's cache (0: unbounded, as full layers)
    int64_t window_piece_ = 0;  // the most context rows one run appends when bounded
    int64_t window_offset_ = 0;
    std::vector<LayerKvCache> cache_;
    DeviceTensor z_;  // DFlash2: [max_block-1, r]
    DeviceTensor h_;  // DSpark: [max_block, D]
    int64_t ctx_len_ = 0;
    Workspace ws_;
};

}  // namespace dflash

// The target: a Qwen3 / Qwen2 / Llama-3 dense or Qwen3-MoE / gpt-oss mixture-of-experts decoder,
// or a hybrid linear-attention one (Qwen3-Next, Qwen3.5 dense or MoE: Gated DeltaNet layers
// between gated full-attention layers, docs/formats.md "Hybrid linear-attention targets"),
// loaded from (or written to) an HF directory (experts in any stored spelling,
// model/expert_weights.h), its
// weights on one backend's device. Full-sequence forward with captured layer outputs (the
// drafter's features, docs/formats.md "DFlash drafter directory"), next-token training (pretrain),
// and a KV-cached session for prefill / decode / verify with cropping. Every step takes its memory
// from a Workspace and exchanges only its inputs (token ids, positions, labels) and small outputs
// with the host. Tested by tests/model/target_test.cpp.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "model/decoder_layer.h"
#include "model/expert_weights.h"
#include "model/hf_config.h"
#include "model/params.h"

namespace dflash {

class TargetModel {
  public:
    TargetModel(Backend& be, TargetConfig cfg);  // zero weights on be's device
    // MXFP4 experts (gpt-oss) stay packed on CUDA and are decoded on the CPU unless `mxfp4` says
    // otherwise (model/expert_weights.h).
    static TargetModel load(Backend& be, const std::filesystem::path& dir,
                            Mxfp4Storage mxfp4 = Mxfp4Storage::backend_default);
    // Random weights (ParamSet::init_random); the hybrid families' (1 + w) norms get w = 0.
    static TargetModel random(Backend& be, TargetConfig cfg, uint64_t seed, float std = 0.02f);
    void save(const std::filesystem::path& dir, DType store_as = DType::bf16) const;

    const TargetConfig& config() const { return cfg_; }
    const LayerDims& dims() const { return dims_; }
    const Tensor& inv_freq() const { return inv_freq_view_; }  // f32 [Dh/2] on the device
    ParamSet& params() { return params_; }
    const ParamSet& params() const { return params_; }
    Backend& backend() const { return params_.backend(); }
    Tensor embed() const;    // [V, D]
    Tensor lm_head() const;  // [V, D] (the embedding when tied)
    // The weights a decode step multiplies through linear(): every attention layer's q/k/v/o and
    // dense MLP projections, and the LM head (empty tensors left out).
    std::vector<Tensor> linear_weights() const;
    // The final norm's scale: model.norm.weight, or for the hybrid families its (1 + w) copy.
    Tensor final_norm() const;
    const LayerWeights& layer(int64_t i) const { return layers_[i]; }
    // The MXFP4 experts kept packed (then params() has no expert matrices), or empty.
    const PackedExperts& packed_experts() const { return packed_; }

    // Full-sequence causal forward without a cache. Writes the outputs of `capture` layers
    // (0-based; output of layer id = HF hidden_states[id+1]) concatenated per row into features
    // [S, K*D] (if non-empty, device, compute dtype) and the final-normed hidden state into
    // final_hidden [S, D] (if non-empty). Without final_hidden the layers after the deepest
    // captured one are not run. Takes its memory from ws (not reset: the caller owns it).
    void forward(Backend& be, Workspace& ws, std::span<const int32_t> tokens,
                 std::span<const int64_t> capture, const Tensor& features,
                 const Tensor& final_hidden) const;

    // forward() document by document: the packed sequence's documents start at doc_starts
    // (ascending, the first 0; empty = one document) and each is run alone from position 0, as
    // if it were the only one, so no document's features depend on another's tokens.
    void forward_documents(Backend& be, Workspace& ws, std::span<const int32_t> tokens,
                           std::span<const int32_t> doc_starts, std::span<const int64_t> capture,
                           const Tensor& features, const Tensor& final_hidden) const;

    // Next-token loss of one sequence (row t predicts tokens[t+1], weight loss_mask[t+1]), added
    // (dense targets without sinks or sliding windows only: the others are frozen targets),
    // into stats (f32 [LossStatsLayout{1}.size()] on the device: loss sum, weight sum, correct,
    // count); when params have gradients, accumulates grad_scale * d(sum w CE)/dparams.
    void train_step(Backend& be, Workspace& ws, std::span<const int32_t> tokens,
                    std::span<const uint8_t> loss_mask, float grad_scale, int64_t ce_chunk,
                    const Tensor& stats);

  private:
    TargetModel(Backend& be, TargetConfig cfg, bool packed_experts);
    // forward() on ids and positions already staged on the device (i32 [S] each).
    void forward_staged(Backend& be, Workspace& ws, const Tensor& ids, const Tensor& pos,
                        std::span<const int64_t> capture, const Tensor& features,
                        const Tensor& final_hidden) const;

    TargetConfig cfg_;
    LayerDims dims_;
    ParamSet params_;
    DeviceTensor inv_freq_;
    Tensor inv_freq_view_;
    // After the weights changed (load, random): the f32 copy of the attention sinks and the
    // hybrid families' (1 + w) norm scales.
    void sync_sinks();
    // The hybrid families: centred_norms_ allocated and the layers' norms pointed at it.
    void point_at_centred_norms(Backend& be);

    // Views into params_, resolved once: every forward (each decode step too) uses them, and the
    // parameters' storage never moves.
    std::vector<LayerWeights> layers_;
    // gpt-oss: f32 [L, H] copy of every layer's self_attn.sinks (the mask reads f32); else empty.
    DeviceTensor sinks_;
    PackedExperts packed_;
    // The hybrid families' zero-centred RMSNorms scale by (1 + w) (w stored, as HF keeps it, and
    // saved as it is): (1 + w) of every such norm, computed in f32 on the host and held in f32
    // on every backend (bf16 would round 1 + w to 8 bits: rmsnorm_fwd takes an f32 scale), in
    // parameter order; the
    // layers' input_ln / post_ln / q_norm / k_norm and final_norm_ are views into it. Empty for
    // other targets. Forward only: these targets are frozen.
    DeviceTensor centred_norms_;
    std::vector<std::pair<std::string, Tensor>> centred_views_;  // parameter name, its (1 + w)
    Tensor final_norm_;
};

// Inference state of one request: a KV cache per full-attention layer, and per Gated DeltaNet
// layer (hybrid targets) its convolution and recurrent states. Positions are implicit: the next
// token fed sits at position length().
//
// Rollback of hybrid targets (docs/engine.md "Verify rollback of hybrid targets"): a recurrent
// state cannot drop rows, so every forward piece of at most kRollbackRows rows first copies the
// states it starts from (the checkpoint, at checkpoint_length()) and saves its rows' convolution
// inputs and recurrence inputs; crop(len) with checkpoint_length() <= len restores the checkpoint
// and replays the len - checkpoint_length() kept rows (gdn_replay). A crop further back is an
// error for hybrid targets (other than crop(0), which starts over).
class TargetSession {
  public:
    // max_rows: the most tokens one forward() feeds (prefills longer than that run in pieces).
    // prepared: copies of the model's weights every product of this session multiplies through
    // (the engine's fp32 panels: Note [f32 panels]), or null (in place); it must outlive the
    // session. rows_ops: pieces of at most kRowsLinearMaxRows rows (decode steps, verify blocks)
    // go through the fused decode-block ops (LayerContext::rows_ops; the LM head too): the CUDA
    // engine's way; on the CPU the ops are plain reference loops. rows_limits: which of those
    // products take rows_linear (the defaults unless a benchmark explores others).
    TargetSession(const TargetModel& model, Backend& be, int64_t capacity,
                  std::vector<int64_t> capture, int64_t max_rows,
                  const PreparedWeights* prepared = nullptr, bool rows_ops = false,
                  RowsLimits rows_limits = {});
    int64_t length() const { return len_; }
    int64_t capacity() const { return capacity_; }
    int64_t feature_dim() const;  // K * D

    // Feeds tokens at positions length()..length()+n-1 and advances. logits [n_logits, V] (device,
    // f32) receive the logits of the last n_logits rows, and features [n, K*D] (device, compute
    // dtype) the captured layer outputs of every row, when non-empty.
    void forward(std::span<const int32_t> tokens, const Tensor& logits, const Tensor& features);
    // Drops every cached position >= len.
    void crop(int64_t len);
    // Hybrid targets: the earliest length crop() can return to (0 for other targets).
    int64_t checkpoint_length() const { return hybrid_ ? checkpoint_len_ : 0; }
    // The most rows a forward piece may have and still be rolled back (verify blocks are 16).
    static constexpr int64_t kRollbackRows = 256;

  private:
    // One piece of at most max_rows tokens at positions start.. (also run dry, to plan ws_).
    void run_piece(Backend& be, Workspace& ws, std::span<const int32_t> tokens, int64_t start,
                   const Tensor& logits, const Tensor& features);

    const TargetModel& model_;
    Backend& be_;
    const PreparedWeights* prepared_;
    bool rows_ops_;
    RowsLimits rows_limits_;
    StepOwner owner_;  // this session's recorded steps (its caches and workspace stay put)
    int64_t capacity_;
    std::vector<int64_t> capture_;
    int64_t max_rows_;
    std::vector<LayerKvCache> cache_;  // per layer; empty for linear layers
    int64_t len_ = 0;
    Workspace ws_;

    // Hybrid targets: per layer (empty for full-attention layers) the live state, the checkpoint
    // and the saved rows of the last piece (LinearSaved, kRollbackRows rows or max_rows if
    // fewer).
    struct LinearCache {
        DeviceTensor conv, ssm, conv_ckpt, ssm_ckpt;
        DeviceTensor qkv, q, k, v, g, beta;
        LinearState state() const { return {conv.view(), ssm.view()}; }
        LinearSaved saved() const;
    };
    bool hybrid_ = false;
    int64_t save_rows_ = 0;
    std::vector<LinearCache> linear_;
    int64_t checkpoint_len_ = 0;  // where the live checkpoint was taken
    // Restores every checkpoint and replays n saved rows (n = 0: the checkpoint alone).
    void replay(int64_t n);
    void reset_linear_states();  // zeros (a sequence start)
};

}  // namespace dflash

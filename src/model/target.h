// The target: a Qwen3 / Qwen2 / Llama-3 dense or Qwen3-MoE / gpt-oss mixture-of-experts decoder
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
    // After the weights changed (load, random): the f32 copy of the attention sinks.
    void sync_sinks();

    // Views into params_, resolved once: every forward (each decode step too) uses them, and the
    // parameters' storage never moves.
    std::vector<LayerWeights> layers_;
    // gpt-oss: f32 [L, H] copy of every layer's self_attn.sinks (the mask reads f32); else empty.
    DeviceTensor sinks_;
    PackedExperts packed_;
};

// Inference state of one request: a KV cache per layer. Positions are implicit: the next token
// fed sits at position length().
class TargetSession {
  public:
    // max_rows: the most tokens one forward() feeds (prefills longer than that run in pieces).
    TargetSession(const TargetModel& model, Backend& be, int64_t capacity,
                  std::vector<int64_t> capture, int64_t max_rows);
    int64_t length() const { return len_; }
    int64_t capacity() const { return capacity_; }
    int64_t feature_dim() const;  // K * D

    // Feeds tokens at positions length()..length()+n-1 and advances. logits [n_logits, V] (device,
    // f32) receive the logits of the last n_logits rows, and features [n, K*D] (device, compute
    // dtype) the captured layer outputs of every row, when non-empty.
    void forward(std::span<const int32_t> tokens, const Tensor& logits, const Tensor& features);
    // Drops every cached position >= len.
    void crop(int64_t len);

  private:
    // One piece of at most max_rows tokens at positions start.. (also run dry, to plan ws_).
    void run_piece(Backend& be, Workspace& ws, std::span<const int32_t> tokens, int64_t start,
                   const Tensor& logits, const Tensor& features);

    const TargetModel& model_;
    Backend& be_;
    StepOwner owner_;  // this session's recorded steps (its caches and workspace stay put)
    int64_t capacity_;
    std::vector<int64_t> capture_;
    int64_t max_rows_;
    std::vector<LayerKvCache> cache_;
    int64_t len_ = 0;
    Workspace ws_;
};

}  // namespace dflash

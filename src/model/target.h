// The target: a Qwen3 / Llama-3 dense decoder loaded from (or written to) an HF directory.
// Full-sequence forward with captured layer outputs (the drafter's features, dflash-spec §1.2),
// next-token training (pretrain), and a KV-cached session for prefill / decode / verify with
// cropping. Tested by tests/model/target_test.cpp.
#pragma once

#include <filesystem>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/scratch.h"
#include "model/decoder_layer.h"
#include "model/hf_config.h"
#include "model/params.h"

namespace dflash {

class TargetModel {
  public:
    explicit TargetModel(TargetConfig cfg);  // zero weights
    static TargetModel load(const std::filesystem::path& dir);
    static TargetModel random(TargetConfig cfg, uint64_t seed, float std = 0.02f);
    void save(const std::filesystem::path& dir, DType store_as = DType::bf16) const;

    const TargetConfig& config() const { return cfg_; }
    const LayerDims& dims() const { return dims_; }
    const std::vector<float>& inv_freq() const { return inv_freq_; }
    ParamSet& params() { return params_; }
    const ParamSet& params() const { return params_; }
    Tensor embed() const;    // [V, D]
    Tensor lm_head() const;  // [V, D] (the embedding when tied)
    const LayerWeights& layer(int64_t i) const { return layers_[i]; }

    // Full-sequence causal forward without a cache. Writes the outputs of `capture` layers
    // (0-based; output of layer id = HF hidden_states[id+1]) concatenated per row into features
    // [S, K*D] (if non-empty) and the final-normed hidden state into final_hidden [S, D] (if
    // non-empty).
    void forward(Backend& be, std::span<const int32_t> tokens, std::span<const int64_t> capture,
                 Scratch& scratch, const Tensor& features, const Tensor& final_hidden) const;

    struct LossStats {
        double loss_sum = 0;    // sum of w * CE over rows
        double weight_sum = 0;  // sum of w
        int64_t correct = 0;    // argmax == label over rows with w > 0
        int64_t rows = 0;       // rows with w > 0
    };
    // Next-token loss of one sequence (row t predicts tokens[t+1], weight loss_mask[t+1]); when
    // params have gradients, accumulates grad_scale * d(sum w CE)/dparams.
    LossStats train_step(Backend& be, std::span<const int32_t> tokens,
                         std::span<const uint8_t> loss_mask, float grad_scale, int64_t ce_chunk,
                         Scratch& scratch);

  private:
    TargetConfig cfg_;
    LayerDims dims_;
    std::vector<float> inv_freq_;
    ParamSet params_;
    // Views into params_, resolved once: every forward (each decode step too) uses them, and the
    // parameters' storage never moves.
    std::vector<LayerWeights> layers_;
};

// Inference state of one request: a KV cache per layer. Positions are implicit: the next token
// fed sits at position length().
class TargetSession {
  public:
    TargetSession(const TargetModel& model, Backend& be, int64_t capacity,
                  std::vector<int64_t> capture);
    int64_t length() const { return len_; }
    int64_t capacity() const { return capacity_; }
    int64_t feature_dim() const;  // K * D

    // Feeds tokens at positions length()..length()+n-1 and advances. logits [n, V] and features
    // [n, K*D] are written when non-empty.
    void forward(std::span<const int32_t> tokens, const Tensor& logits, const Tensor& features);
    // Drops every cached position >= len.
    void crop(int64_t len);

  private:
    const TargetModel& model_;
    Backend& be_;
    int64_t capacity_;
    std::vector<int64_t> capture_;
    std::vector<LayerKvCache> cache_;
    int64_t len_ = 0;
    Scratch scratch_;
};

}  // namespace dflash

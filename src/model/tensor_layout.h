// The tensor names and shapes of target checkpoints (HF Qwen3/Llama naming) and DFlash drafter
// checkpoints (docs/formats.md "DFlash drafter directory"), computed from a config without touching
// any data. Loaders check files against these lists (check_model_files, before allocating); `dflash
// inspect` reports what is missing, unexpected or misshapen. Tested by
// tests/model/tensor_layout_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "model/hf_config.h"

namespace dflash {

struct TensorSpec {
    std::string name;
    std::vector<int64_t> shape;
    int64_t numel() const;
};

// model.embed_tokens.weight [V, D]; per layer i: model.layers.{i}.input_layernorm.weight [D],
// .self_attn.{q,k,v,o}_proj.weight (+ .bias when attention_bias), .self_attn.{q,k}_norm.weight
// [Dh] (qwen3), .post_attention_layernorm.weight [D], .mlp.{gate,up,down}_proj.weight;
// model.norm.weight [D]; lm_head.weight [V, D] unless tie_word_embeddings.
std::vector<TensorSpec> target_tensor_specs(const TargetConfig& c);

// fc.weight [D, K*D], hidden_norm.weight [D], norm.weight [D], and per layer i the 11 tensors
// layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
// post_attention_layernorm, mlp.{gate,up,down}_proj}.weight. No embeddings and no lm_head: the
// drafter borrows the target's. DFlash2 adds per layer layers.{i}.{attention,mlp}_conv.base_kernel
// [2, k, D] and .kernel_projection.weight [2*k*G, D], and
// candidate_selector.hidden_projection.weight [r, D],
// candidate_selector.{predecessor,successor}_codebook [V, r] (docs/formats.md "DFlash2 drafter
// directory").
std::vector<TensorSpec> drafter_tensor_specs(const DrafterConfig& c);

// Before a model is allocated (TargetConfig::load, DrafterConfig::load): when `dir` holds weights
// (model.safetensors or an index), the model's f32 size must fit in this machine's memory and
// every tensor of `specs` must be in them with its shape (the error names the directory and the
// first tensors that are not). A directory without weights is left to the weight loader.
void check_model_files(const std::filesystem::path& dir, const std::vector<TensorSpec>& specs);

// Groups for parameter counts.
enum class ParamGroup { embeddings, attention, mlp, norms, fc, other };
ParamGroup param_group(std::string_view tensor_name);
std::string_view param_group_name(ParamGroup g);
inline constexpr int kNumParamGroups = 6;

}  // namespace dflash

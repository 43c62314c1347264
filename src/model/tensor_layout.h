// The tensor names and shapes of target checkpoints (HF Qwen3/Llama naming) and DFlash drafter
// checkpoints (docs/formats.md "DFlash drafter directory"), computed from a config without touching
// any data. Loaders check files against these lists (check_target_files / check_drafter_files,
// before allocating) with the same comparison (compare_layout) that `dflash inspect` reports from.
// Tested by tests/model/tensor_layout_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
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

// The dtype a stored tensor must have: "U8" for MXFP4 expert blocks and scales, else empty (F32,
// BF16 or F16).
std::string_view required_stored_dtype(std::string_view tensor_name);

// model.embed_tokens.weight [V, D]; per layer i: model.layers.{i}.input_layernorm.weight [D],
// .self_attn.{q,k,v,o}_proj.weight (+ .bias when attention_bias), .self_attn.{q,k}_norm.weight
// [Dh] (qwen3), .post_attention_layernorm.weight [D], .mlp.{gate,up,down}_proj.weight;
// model.norm.weight [D]; lm_head.weight [V, D] unless tie_word_embeddings.
// MoE layers (is_moe_layer) replace the mlp.{gate,up,down}_proj tensors by the router,
// .mlp.gate.weight [E, D] (qwen3_moe) or .mlp.router.{weight [E, D], bias [E]} (gpt_oss), and the
// experts in the one layout the forward reads: .mlp.experts.gate_up_proj [E, 2I_e, D] (each
// expert's gate rows, then its up rows: Linear orientation) and .mlp.experts.down_proj [E, D, I_e];
// gpt_oss adds .mlp.experts.gate_up_proj_bias [E, 2I_e] (same row order) and
// .mlp.experts.down_proj_bias [E, D], and .self_attn.sinks [H] to every layer.
// These are the model's parameters; checkpoints store experts in one of the ExpertFormats.
std::vector<TensorSpec> target_tensor_specs(const TargetConfig& c);

// How a checkpoint stores the experts of MoE layers:
enum class ExpertFormat {
    none,        // no MoE layers
    per_expert,  // qwen3_moe on the Hub: .mlp.experts.{e}.{gate,up,down}_proj.weight
    fused,       // qwen3_moe, transformers 5: .mlp.experts.gate_up_proj [E, 2I, D] (gate rows
                 // first), .mlp.experts.down_proj [E, D, I]: the model's own layout
    gpt_oss,     // gpt_oss as transformers holds it: .mlp.experts.gate_up_proj [E, D, 2I] used as
                 // x·W with gate and up columns interleaved (2u gate, 2u+1 up), down_proj
                 // [E, I, D], biases gate_up_proj_bias [E, 2I] (interleaved), down_proj_bias [E, D]
    mxfp4,       // gpt_oss on the Hub: .mlp.experts.{gate_up,down}_proj_{blocks,scales} (U8,
                 // Linear orientation, gate/up rows interleaved) and the two biases as above
};
std::string_view expert_format_name(ExpertFormat f);
// The format of a checkpoint holding `stored` (judged by the first MoE layer's names); a
// checkpoint that holds none of them gets the family's Hub format.
ExpertFormat detect_expert_format(const TargetConfig& c, const std::vector<std::string>& stored);
// The tensors a checkpoint in format f holds (target_tensor_specs with the experts spelled so).
std::vector<TensorSpec> stored_target_specs(const TargetConfig& c, ExpertFormat f);

// How a checkpoint names a target's tensors. The hybrid families' multimodal wrappers
// (docs/formats.md "Hybrid linear-attention targets") keep the text model under
// "model.language_model." instead of "model." and add a vision tower (model.visual.*) and a
// multi-token-prediction head (mtp.*), which a text target skips (Qwen3-Next stores mtp.* too).
struct CheckpointNames {
    std::string language_prefix = "model.";
    int64_t vision = 0, mtp = 0;  // tensors skipped
    // A model tensor's stored name (model.X -> language_prefix X; others unchanged).
    std::string stored(const std::string& model_name) const;
    // A stored tensor's model name, or "" for a skipped one.
    std::string model(const std::string& stored_name) const;
};
// The names of checkpoint `stored` for config c: the wrapper prefix when any stored name has it;
// skips only for the hybrid families (other targets keep every name, so their stray tensors are
// still reported).
CheckpointNames checkpoint_names(const TargetConfig& c, const std::vector<std::string>& stored);

// fc.weight [D, K*D], hidden_norm.weight [D], norm.weight [D], and per layer i the 11 tensors
// layers.{i}.{input_layernorm, self_attn.{q,k,v,o}_proj, self_attn.{q,k}_norm,
// post_attention_layernorm, mlp.{gate,up,down}_proj}.weight. No embeddings and no lm_head: the
// drafter borrows the target's. DFlash2 adds per layer layers.{i}.{attention,mlp}_conv.base_kernel
// [2, k, D] and .kernel_projection.weight [2*k*G, D], and
// candidate_selector.hidden_projection.weight [r, D],
// candidate_selector.{predecessor,successor}_codebook [V, r] (docs/formats.md "DFlash2 drafter
// directory").
std::vector<TensorSpec> drafter_tensor_specs(const DrafterConfig& c);

// One tensor as a checkpoint stores it.
struct StoredTensor {
    std::string dtype;  // safetensors spelling ("BF16", ...)
    std::vector<int64_t> shape;
};

// One way a checkpoint differs from the layout its config implies.
struct LayoutDifference {
    enum class Kind {
        missing,           // in the layout, not stored
        misshapen,         // stored with another shape
        unexpected,        // stored, not in the layout
        stored_embedding,  // a drafter storing embeddings or lm_head (it borrows the target's)
        wrong_dtype,       // a weight stored as neither F32, BF16 nor F16 (or not the
                           // dtype required_stored_dtype names)
    };
    Kind kind;
    std::string name;
    std::vector<int64_t> stored;    // shape in the checkpoint ([] when missing)
    std::vector<int64_t> expected;  // shape the layout implies ([] when not in it)
    std::string dtype;              // stored dtype
    std::string sentence() const;   // "missing tensor 'x' [2, 3]", ...: one full problem
};

// The one comparison behind `dflash inspect` and the model loaders (check_target_files,
// check_drafter_files): the layout's tensors that are missing or misshapen (in layout order), then
// the stored tensors that are not in it or have a non-float dtype (in name order). Stored tensors
// that are harmless become `notes` instead: RoPE inv_freq buffers, and lm_head.weight next to tied
// embeddings.
struct LayoutComparison {
    std::vector<LayoutDifference> differences;
    std::vector<std::string> notes;
};
// borrowed: for a drafter, the shape [V, D] of the target's embedding and lm_head. A drafter
// storing a tensor of that shape under an embedding or lm_head name (DeepSpec checkpoints keep
// frozen copies of the target's) gets a note: it is ignored, the target's own are used. Any other
// stored embedding is refused.
LayoutComparison compare_layout(const std::vector<TensorSpec>& layout,
                                const std::map<std::string, StoredTensor>& stored,
                                bool tied_embeddings, bool drafter,
                                const std::vector<int64_t>& borrowed = {});

// Before a model is allocated (TargetModel::load, DrafterModel::load): when `dir` holds weights
// (model.safetensors or an index), the model's f32 size must fit in this machine's memory and the
// stored tensors must be exactly the layout the config implies (compare_layout against
// stored_target_specs in the detected expert format for targets: none missing or
// misshapen, none unexpected, so a DFlash2 drafter whose config says DFlash is refused instead of
// losing its DFlash2 tensors). The error names the directory and the first differences. A
// directory without weights is left to the weight loader.
// Differences are named with the file that holds the tensor. Returns the target's expert format
// (ExpertFormat::none for dense targets or a directory without weights). mxfp4_packed: MXFP4
// experts would stay packed (model/expert_weights.h), so they do not count in the memory check.
// Hybrid wrappers: a checkpoint without the language model's tensors is refused by name.
ExpertFormat check_target_files(const std::filesystem::path& dir, const TargetConfig& c,
                                bool mxfp4_packed = false);
void check_drafter_files(const std::filesystem::path& dir, const DrafterConfig& c);

// Groups for parameter counts.
enum class ParamGroup { embeddings, attention, mlp, norms, fc, other };
ParamGroup param_group(std::string_view tensor_name);
std::string_view param_group_name(ParamGroup g);
inline constexpr int kNumParamGroups = 6;

}  // namespace dflash

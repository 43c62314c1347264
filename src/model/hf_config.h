// HF `config.json` of target models (Qwen3, Qwen2, Llama, Qwen3-MoE, gpt-oss) and DFlash drafters
// (docs/formats.md "DFlash drafter directory"). Reading is lenient where HF is (defaults for absent
// keys, `rope_type` or `type`, block_size top-level or inside dflash_config); writing emits exactly
// what HF transformers (targets) and z-lab/SGLang/vLLM (drafters) load. Every loaded config is
// validated, and the error lists every problem found with the offending value. Tested by
// tests/model/hf_config_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/ops.h"

namespace dflash {

// Upper bounds of config.json values: generous for any real model, small enough that a damaged or
// mistyped config (num_hidden_layers 10^9) is refused before anything is allocated. kMaxBlockSize
// and kMaxTargetFeatures are the ranges of the drafter.block_size and
// drafter.num_target_features settings (tests/model/hf_config_test.cpp checks they agree).
inline constexpr int64_t kMaxLayers = 4096;
inline constexpr int64_t kMaxHiddenSize = int64_t{1} << 17;
inline constexpr int64_t kMaxIntermediateSize = int64_t{1} << 20;
inline constexpr int64_t kMaxHeads = 1024;
inline constexpr int64_t kMaxHeadDim = 1024;
inline constexpr int64_t kMaxVocabSize = int64_t{1} << 24;
inline constexpr int64_t kMaxPositions = int64_t{1} << 26;
inline constexpr int64_t kMaxBlockSize = 256;
inline constexpr int64_t kMaxTargetFeatures = 64;
inline constexpr int64_t kMaxExperts = 4096;

struct TargetConfig {
    // "qwen3", "qwen2", "llama", "qwen3_moe", "gpt_oss", or a hybrid family: "qwen3_next",
    // "qwen3_5", "qwen3_5_moe" (config.json's qwen3_5_text / qwen3_5_moe_text are read as these)
    std::string model_type = "qwen3";
    int64_t hidden_size = 0;          // D
    int64_t intermediate_size = 0;    // I of dense layers (gpt_oss: of each expert, = I_e)
    int64_t num_hidden_layers = 0;    // L
    int64_t num_attention_heads = 0;  // H
    int64_t num_key_value_heads = 0;  // Hkv
    int64_t head_dim = 0;             // Dh (default D / H)
    int64_t vocab_size = 0;           // V
    int64_t max_position_embeddings = 0;
    double rms_norm_eps = 1e-6;
    RopeConfig rope;
    bool tie_word_embeddings = false;
    bool attention_bias = false;  // q/k/v/o projections carry biases (HF Llama/Qwen3 semantics)
    bool qk_norm = true;          // true for qwen3 (q_norm/k_norm), false for llama
    int64_t bos_token_id = -1;    // -1: none
    int64_t eos_token_id = -1;    // -1: none; the first id where config.json lists several
    std::vector<int64_t>
        extra_eos_token_ids;  // the rest of such a list (Llama-3.1: 128008, 128009)
    // generation_config.json's eos_token_id (an id or a list), read by load(); not in config.json.
    std::vector<int64_t> generation_eos_token_ids;
    std::string torch_dtype = "bfloat16";  // dtype of the stored weights, as HF spells it

    // Mixture of experts (qwen3_moe, gpt_oss). A layer's feed-forward is either the dense SwiGLU
    // MLP or E experts of which a router picks k per token (is_moe_layer). qwen3_moe's router
    // takes a softmax over all E logits, then the top k (renormalised when norm_topk_prob);
    // gpt_oss's takes the top k logits (router bias added), then a softmax over those k.
    int64_t num_experts = 0;               // E (num_experts; gpt_oss: num_local_experts); 0 = dense
    int64_t num_experts_per_tok = 0;       // k (gpt_oss also spells it experts_per_token)
    int64_t moe_intermediate_size = 0;     // I_e (gpt_oss: intermediate_size)
    bool norm_topk_prob = false;           // qwen3_moe: the k weights are divided by their sum
    int64_t decoder_sparse_step = 1;       // qwen3_moe: layer i is MoE when (i+1) % step == 0 ...
    std::vector<int64_t> mlp_only_layers;  // qwen3_moe: ... and i is not listed here
    double swiglu_limit = 0;  // gpt_oss: the experts' clamped SwiGLU limit (7); 0 = plain SwiGLU

    // Attention variants (gpt_oss): per layer "full_attention" or "sliding_attention" (empty: all
    // full); sliding layers see the sliding_window most recent keys, the query's own included.
    std::vector<std::string> layer_types;
    int64_t sliding_window = 0;    // 0: none
    bool attention_sinks = false;  // gpt_oss: self_attn.sinks [H], a logit per head that joins
                                   // the softmax's denominator only

    // Hybrid linear-attention families (qwen3_next, qwen3_5, qwen3_5_moe; docs/formats.md
    // "Hybrid linear-attention targets"): layer_types lists "linear_attention" (a Gated DeltaNet
    // layer) or "full_attention" per layer (filled from full_attention_interval when config.json
    // has no list). Every RMSNorm but the DeltaNet's output norm scales by (1 + w).
    double partial_rotary_factor = 1.0;  // RoPE turns the first factor * head_dim dims of a head
    bool attn_output_gate = false;       // q_proj also yields a per-head sigmoid output gate
    std::vector<int64_t> mrope_section;  // qwen3_5's M-RoPE split, kept for saving only (text
    bool mrope_interleaved = false;      // positions are equal on all streams: plain 1-D RoPE)
    int64_t linear_num_key_heads = 0;    // Hk
    int64_t linear_num_value_heads = 0;  // Hv (a multiple of Hk)
    int64_t linear_key_head_dim = 0;     // dk
    int64_t linear_value_head_dim = 0;   // dv
    int64_t linear_conv_kernel_dim = 0;  // K, the causal convolution's taps
    int64_t shared_expert_intermediate_size = 0;  // MoE layers' shared expert width (0: none)
    // Read from a multimodal ...ForConditionalGeneration config (the text model in text_config,
    // weights under model.language_model.); save() writes the text model alone.
    bool multimodal_wrapper = false;

    static TargetConfig from_json(const nlohmann::json& j);
    // from_json without the final problems() check (malformed values still throw): for tools
    // such as `dflash inspect` that report every problem instead of stopping at the first.
    static TargetConfig from_json_unchecked(const nlohmann::json& j);
    nlohmann::json to_json() const;
    // dir/config.json, and dir/generation_config.json's eos ids when that file exists, parsed and
    // checked for their own consistency (problems()). The weights are not looked at: the model
    // loaders check them against the config (check_target_files in tensor_layout.h).
    static TargetConfig load(const std::filesystem::path& dir);
    void save(const std::filesystem::path& dir) const;  // atomic
    // Problems that make the config unusable, each a full sentence; empty when valid.
    std::vector<std::string> problems() const;
    // Every id that ends a reply: eos_token_id, extra_eos_token_ids, generation_eos_token_ids, in
    // that order, without duplicates.
    std::vector<int64_t> stop_token_ids() const;
    // Projection biases: Qwen2 puts them on q/k/v (never o_proj, and its config.json has no
    // attention_bias key); Llama and Qwen3 on all four exactly when attention_bias is set.
    bool qkv_bias() const { return attention_bias || model_type == "qwen2"; }
    bool o_bias() const { return attention_bias && model_type != "qwen2"; }

    bool moe() const { return num_experts > 0; }
    // qwen3_next, qwen3_5 or qwen3_5_moe (hf_config_hybrid.cpp).
    bool hybrid() const;
    // Layer i is a Gated DeltaNet ("linear_attention") layer.
    bool is_linear_layer(int64_t i) const;
    int64_t num_linear_layers() const;
    // The leading dims of each head that RoPE turns: head_dim * partial_rotary_factor (even).
    int64_t rotary_dim() const;
    // The q|k|v channels of a linear layer: 2 * Hk * dk + Hv * dv.
    int64_t linear_conv_dim() const {
        return 2 * linear_num_key_heads * linear_key_head_dim +
               linear_num_value_heads * linear_value_head_dim;
    }
    bool gpt_oss() const { return model_type == "gpt_oss"; }
    // Whether layer i's feed-forward is the experts (else the dense MLP): gpt_oss every layer;
    // otherwise E > 0, i not in mlp_only_layers and (i+1) % decoder_sparse_step == 0.
    bool is_moe_layer(int64_t i) const;
    int64_t num_moe_layers() const;
    // The keys layer i sees: 0 = every earlier one (full causal), else sliding_window.
    int64_t layer_window(int64_t i) const;
};

// Which drafter a config describes: DFlash (architectures DFlashDraftModel), DFlash2
// (DFlash2DraftModel: a grouped dynamic convolution around every sublayer and a candidate
// selector, docs/formats.md "DFlash2 drafter directory") or DSpark (Qwen3DSparkModel /
// DSparkDraftModel / a speculators "dspark" config: the DFlash backbone whose anchor slot also
// predicts, a Markov logit-bias head and a confidence head, docs/formats.md "DSpark drafter
// directory").
enum class DrafterArch { dflash, dflash2, dspark };

// DSpark's Markov head (docs/formats.md "DSpark drafter directory"): vanilla B = W2 W1[prev];
// gated B = W2 (sigmoid(Wg [h; e] + bg) * e); rnn B = W2 tanh(out) with a recurrent state s
// over a block's slots (J [s; e; h] + bJ split gate | candidate | output).
enum class MarkovHeadType { vanilla, gated, rnn };
const char* markov_head_type_name(MarkovHeadType t);
// "vanilla", "gated" or "rnn"; anything else is an error naming `what` (the key or setting).
MarkovHeadType parse_markov_head_type(const std::string& name, const std::string& what);

// The DSpark-only keys.
struct DsparkConfig {
    int64_t markov_rank = 256;  // r
    MarkovHeadType markov_head = MarkovHeadType::vanilla;
    bool confidence_head = true;         // enable_confidence_head
    bool confidence_with_markov = true;  // confidence_head_with_markov: input [h; e], else h
    // num_anchors: DeepSpec's model refuses a config without it (a training count it stores in
    // the config; decoding never reads it). Kept from the config read, else DeepSpec's 512.
    int64_t num_anchors = 512;
    // The confidence head's input width for hidden size D.
    int64_t confidence_dim(int64_t hidden) const {
        return confidence_with_markov ? hidden + markov_rank : hidden;
    }
};

// How a drafter directory's config.json is laid out (`dflash inspect` names it; `dflash export
// drafter --dialect` picks it for DSpark drafters): DFlash/DFlash2's z-lab layout, DSpark's
// DeepSpec/SGLang layout (architectures Qwen3DSparkModel, the DSpark keys top-level and in
// dflash_config) or the speculators (vLLM) layout (speculators_model_type "dspark").
enum class DrafterDialect { zlab, deepspec, speculators };
const char* drafter_dialect_name(DrafterDialect d);
DrafterDialect parse_drafter_dialect(const std::string& name);

// Largest selector_top_k and selector_rank accepted: far above the released 16 and 256, small
// enough that a damaged config is refused before codebooks are allocated.
inline constexpr int64_t kMaxSelectorTopK = 1024;
inline constexpr int64_t kMaxSelectorRank = 8192;

// The DFlash2-only keys (docs/formats.md "DFlash2 drafter directory"), each read from dflash_config
// first, then the top level, then its default (the reference's lookup rule).
struct Dflash2Config {
    int64_t conv_kernel_size = 2;          // k taps (required in config.json)
    int64_t conv_group_size = 16;          // S channels per group, G = D / S (required)
    int64_t selector_rank = 256;           // r (required)
    int64_t selector_top_k = 16;           // K candidates per slot (required)
    double output_multiplier = 1.0;        // logits *= m (> 0)
    double final_logit_softcapping = 0.0;  // s > 0: logits = s tanh(logits / s); 0 = off
    double input_embedding_scale = 1.0;    // block embeddings *= this (anchor row included)
    int64_t groups(int64_t hidden) const { return hidden / conv_group_size; }  // G
};

struct DrafterConfig {
    // Per-layer dims (hidden, heads, kv, head_dim, intermediate, eps, rope, vocab = target vocab);
    // layer.num_hidden_layers = draft layers. Always Qwen3-style layers (qk_norm, no biases).
    TargetConfig layer;
    int64_t block_size = 16;
    int64_t mask_token_id = -1;
    int64_t num_target_layers = 0;
    // K ids, in feature concatenation order; the last target layer is refused by problems().
    std::vector<int64_t> target_layer_ids;
    DrafterArch arch = DrafterArch::dflash;
    Dflash2Config d2;  // arch == dflash2 only
    DsparkConfig ds;   // arch == dspark only
    // Attention of every drafter (docs/formats.md "DFlash drafter directory", docs/training.md
    // "Sliding-window drafter layers"): one flag per layer (layer_types "sliding_attention"), the
    // window of those layers (sliding_window W > 0 when any slides) and is_causal (top level, else
    // dflash_config.causal; absent: a layer is causal iff it is sliding, as the reference
    // decides). A DFlash drafter's sliding layers are causal and its full ones bidirectional
    // whatever is_causal says; DFlash2 follows is_causal.
    std::vector<bool> sliding_layers;
    int64_t sliding_window = 0;
    int is_causal = -1;  // -1 absent, 0 false, 1 true
    bool sliding(int64_t l) const;
    bool layer_causal(int64_t l) const;
    int64_t layer_window(int64_t l) const;                // 0: every key visible
    void attention_layout_json(nlohmann::json& j) const;  // to_json's layer_types and window keys

    bool dflash2() const { return arch == DrafterArch::dflash2; }
    bool dspark() const { return arch == DrafterArch::dspark; }
    // Tokens one draft proposes: DSpark's anchor slot predicts too (B), DFlash's does not (B-1).
    int64_t num_drafts() const { return dspark() ? block_size : block_size - 1; }
    void dflash2_json(nlohmann::json& j) const;  // to_json's DFlash2 part
    void dspark_json(nlohmann::json& j) const;   // to_json's DSpark part (DeepSpec/SGLang)
    // The speculators (vLLM) layout of a DSpark drafter, and its reading (hf_config_dspark.cpp).
    nlohmann::json to_speculators_json() const;
    static DrafterConfig from_speculators_json(const nlohmann::json& j);
    // config.json in `dialect` (zlab: to_json for DFlash/DFlash2; DSpark drafters take deepspec
    // or speculators).
    void save(const std::filesystem::path& dir, DrafterDialect dialect) const;
    static DrafterConfig from_json(const nlohmann::json& j);
    static DrafterConfig from_json_unchecked(const nlohmann::json& j);  // see TargetConfig's
    nlohmann::json to_json() const;
    // dir/config.json, parsed and checked as TargetConfig::load (weights: check_drafter_files).
    static DrafterConfig load(const std::filesystem::path& dir);
    void save(const std::filesystem::path& dir) const;
    std::vector<std::string> problems() const;
    int64_t num_features() const { return static_cast<int64_t>(target_layer_ids.size()); }  // K
};

// The DFlash reference rule (docs/formats.md "DFlash drafter directory"): n == 1 -> [L/2] (L-2 when
// L == 2); otherwise n ids spread evenly from layer 1 to layer L-3, rounded half to even as
// Python's round() does. Never the last layer (Note [Last target layer] in hf_config.cpp); an error
// when an id would fall outside [0, L-2]. Shallow targets can get a layer twice, as from the
// reference code.
std::vector<int64_t> default_target_layer_ids(int64_t num_target_layers, int64_t n);

// A drafter for `t`: its per-layer dims, vocab and rope, `num_layers` Qwen3-style layers. An empty
// `target_layer_ids` picks default_target_layer_ids with n = 5 (as the released drafters), fewer
// for targets too shallow to give 5 distinct layers.
DrafterConfig make_drafter_config(const TargetConfig& t, int64_t num_layers, int64_t block_size,
                                  int64_t mask_token_id, std::vector<int64_t> target_layer_ids);

// Everything about `d` that does not fit `t` (hidden size, vocab, layer count, ...); empty if none.
std::vector<std::string> drafter_target_mismatches(const DrafterConfig& d, const TargetConfig& t);

// True if this config.json describes a DFlash drafter rather than a target.
bool is_drafter_config_json(const nlohmann::json& j);
// The layout of a drafter's config.json (is_drafter_config_json true).
DrafterDialect drafter_config_dialect(const nlohmann::json& j);

}  // namespace dflash

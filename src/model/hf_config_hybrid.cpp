// The hybrid linear-attention part of a target's config.json (qwen3_next, qwen3_5, qwen3_5_moe;
// docs/formats.md "Hybrid linear-attention targets"): the multimodal wrapper's text_config,
// layer_types or full_attention_interval, partial rotary, the output gate, the Gated DeltaNet
// dims, the shared expert. Tested by tests/model/hybrid_config_test.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "model/hf_config_fields.h"

namespace dflash {

namespace {

constexpr const char* kLinear = "linear_attention";
constexpr const char* kFullAttention = "full_attention";

}  // namespace

bool TargetConfig::hybrid() const {
    return model_type == "qwen3_next" || model_type == "qwen3_5" || model_type == "qwen3_5_moe";
}

bool TargetConfig::is_linear_layer(int64_t i) const {
    return hybrid() && i >= 0 && i < static_cast<int64_t>(layer_types.size()) &&
           layer_types[i] == kLinear;
}

int64_t TargetConfig::num_linear_layers() const {
    int64_t n = 0;
    for (int64_t i = 0; i < num_hidden_layers; ++i) n += is_linear_layer(i) ? 1 : 0;
    return n;
}

int64_t TargetConfig::rotary_dim() const {
    // transformers: int(head_dim * partial_rotary_factor), the inverse frequencies over that many
    // dims.
    return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

namespace config_fields {

bool is_hybrid_model_type(const std::string& t) {
    return t == "qwen3_next" || t == "qwen3_5" || t == "qwen3_5_moe" || t == "qwen3_5_text" ||
           t == "qwen3_5_moe_text";
}

HybridSource hybrid_source(const json& j) {
    const std::string t = j["model_type"].get<std::string>();
    HybridSource s{&j, t, false};
    if (t == "qwen3_5_text") s.model_type = "qwen3_5";
    if (t == "qwen3_5_moe_text") s.model_type = "qwen3_5_moe";
    if ((t == "qwen3_5" || t == "qwen3_5_moe") && present(j, "text_config")) {
        // The published multimodal checkpoints: the language model's config is text_config.
        const json& tc = j["text_config"];
        DF_CHECK(tc.is_object(), "config key 'text_config' is {} (expected an object)", tc.dump());
        const std::string want = t + "_text";
        DF_CHECK(!present(tc, "model_type") || tc["model_type"] == want,
                 "config key 'text_config.model_type' is {} but a {} wrapper holds a \"{}\" text "
                 "model",
                 tc["model_type"].dump(), t, want);
        s.text = &tc;
        s.wrapper = true;
    }
    return s;
}

void parse_hybrid_fields(const json& j, const json& top, bool wrapper, TargetConfig& c) {
    c.multimodal_wrapper = wrapper;
    if (wrapper) {
        // transformers reads tie_word_embeddings (and the dtype) at the wrapper's top level.
        c.tie_word_embeddings = opt_bool(top, "tie_word_embeddings", c.tie_word_embeddings);
        for (const char* key : {"torch_dtype", "dtype"})
            if (!present(j, key) && present(top, key) && top[key].is_string())
                c.torch_dtype = top[key].get<std::string>();
        if (c.eos_token_id < 0 && present(top, "eos_token_id") &&
            top["eos_token_id"].is_number_integer())
            c.eos_token_id = top["eos_token_id"].get<int64_t>();
    }
    const int64_t L = std::clamp<int64_t>(c.num_hidden_layers, 0, kMaxLayers);
    c.layer_types.clear();
    if (present(j, "layer_types")) {
        DF_CHECK(j["layer_types"].is_array(),
                 "config key 'layer_types' is {} (expected a list of \"linear_attention\" / "
                 "\"full_attention\")",
                 j["layer_types"].dump());
        DF_CHECK(j["layer_types"].size() <= static_cast<size_t>(kMaxLayers),
                 "config key 'layer_types' lists {} layers, more than {}", j["layer_types"].size(),
                 kMaxLayers);
        for (const auto& t : j["layer_types"])
            c.layer_types.push_back(t.is_string() ? t.get<std::string>() : t.dump());
    } else {
        // Qwen3-Next's rule: layer i is full attention iff (i + 1) % interval == 0.
        const int64_t interval = opt_int(j, "full_attention_interval", 4);
        DF_CHECK(interval >= 1, "config key 'full_attention_interval' is {} (must be at least 1)",
                 interval);
        for (int64_t i = 0; i < L; ++i)
            c.layer_types.emplace_back((i + 1) % interval == 0 ? kFullAttention : kLinear);
    }
    // partial_rotary_factor: inside rope_parameters (transformers 5) or at the top level (older
    // configs); transformers' default 0.25 when neither has it.
    c.partial_rotary_factor = 0.25;
    const json* rp = nullptr;
    for (const char* key : {"rope_parameters", "rope_scaling"})
        if (present(j, key) && j[key].is_object() && rp == nullptr) rp = &j[key];
    c.partial_rotary_factor = opt_double(j, "partial_rotary_factor", c.partial_rotary_factor);
    if (rp != nullptr) {
        c.partial_rotary_factor = opt_double(*rp, "partial_rotary_factor", c.partial_rotary_factor);
        if (present(*rp, "mrope_section")) {
            DF_CHECK((*rp)["mrope_section"].is_array(),
                     "config key 'mrope_section' is {} (expected a list of integers)",
                     (*rp)["mrope_section"].dump());
            for (const auto& v : (*rp)["mrope_section"])
                c.mrope_section.push_back(as_int(v, "mrope_section"));
        }
        c.mrope_interleaved = opt_bool(*rp, "mrope_interleaved", false);
    }
    // Qwen3-Next's attention is always gated; Qwen3.5 says so in attn_output_gate.
    c.attn_output_gate = c.model_type == "qwen3_next" || opt_bool(j, "attn_output_gate", true);
    c.linear_num_key_heads = opt_int(j, "linear_num_key_heads", 16);
    c.linear_num_value_heads = opt_int(j, "linear_num_value_heads", 32);
    c.linear_key_head_dim = opt_int(j, "linear_key_head_dim", 128);
    c.linear_value_head_dim = opt_int(j, "linear_value_head_dim", 128);
    c.linear_conv_kernel_dim = opt_int(j, "linear_conv_kernel_dim", 4);
    if (c.model_type == "qwen3_5") return;
    // transformers' Qwen3NextConfig / Qwen3_5MoeTextConfig defaults for absent keys.
    const bool next = c.model_type == "qwen3_next";
    c.num_experts = opt_int(j, "num_experts", next ? 512 : 256);
    c.num_experts_per_tok = opt_int(j, "num_experts_per_tok", next ? 10 : 8);
    c.moe_intermediate_size = opt_int(j, "moe_intermediate_size", 512);
    c.shared_expert_intermediate_size = opt_int(j, "shared_expert_intermediate_size", 512);
    // qwen3_5_moe's router always renormalises its k weights (it has no such key).
    c.norm_topk_prob = next ? opt_bool(j, "norm_topk_prob", true) : true;
    if (!next) return;
    c.decoder_sparse_step = opt_int(j, "decoder_sparse_step", 1);
    if (present(j, "mlp_only_layers")) {
        DF_CHECK(j["mlp_only_layers"].is_array(),
                 "config key 'mlp_only_layers' is {} (expected a list of integers)",
                 j["mlp_only_layers"].dump());
        for (const auto& v : j["mlp_only_layers"])
            c.mlp_only_layers.push_back(as_int(v, "mlp_only_layers"));
    }
}

void hybrid_problems(const TargetConfig& c, std::vector<std::string>& p) {
    auto need = [&](bool ok, std::string msg) {
        if (!ok) p.push_back(std::move(msg));
    };
    need(static_cast<int64_t>(c.layer_types.size()) == c.num_hidden_layers,
         fmt::format("layer_types lists {} layers but num_hidden_layers={}", c.layer_types.size(),
                     c.num_hidden_layers));
    for (size_t i = 0; i < c.layer_types.size(); ++i)
        need(c.layer_types[i] == kLinear || c.layer_types[i] == kFullAttention,
             fmt::format("layer_types[{}] is '{}' (expected \"{}\" or \"{}\")", i, c.layer_types[i],
                         kLinear, kFullAttention));
    const std::pair<const char*, int64_t> dims[] = {
        {"linear_num_key_heads", c.linear_num_key_heads},
        {"linear_num_value_heads", c.linear_num_value_heads},
        {"linear_key_head_dim", c.linear_key_head_dim},
        {"linear_value_head_dim", c.linear_value_head_dim}};
    for (const auto& [name, v] : dims) {
        const int64_t cap = std::string_view(name).ends_with("heads") ? kMaxHeads : kMaxHeadDim;
        need(v >= 1 && v <= cap, fmt::format("{}={} is outside [1, {}]", name, v, cap));
    }
    if (c.linear_num_key_heads > 0)
        need(c.linear_num_value_heads % c.linear_num_key_heads == 0,
             fmt::format("linear_num_value_heads={} is not a multiple of linear_num_key_heads={} "
                         "(each key head serves a whole group of value heads)",
                         c.linear_num_value_heads, c.linear_num_key_heads));
    need(c.linear_conv_kernel_dim >= 2 && c.linear_conv_kernel_dim <= 64,
         fmt::format("linear_conv_kernel_dim={} is outside [2, 64] (released models use 4)",
                     c.linear_conv_kernel_dim));
    const int64_t r = c.rotary_dim();
    need(c.partial_rotary_factor > 0 && c.partial_rotary_factor <= 1 && r >= 2 && r % 2 == 0,
         fmt::format("partial_rotary_factor={} gives {} rotary dims of head_dim={}; they must be "
                     "even and at least 2 (released models: 0.25 of 256)",
                     c.partial_rotary_factor, r, c.head_dim));
    need(c.shared_expert_intermediate_size >= 0 &&
             c.shared_expert_intermediate_size <= kMaxIntermediateSize,
         fmt::format("shared_expert_intermediate_size={} is outside [0, {}]",
                     c.shared_expert_intermediate_size, kMaxIntermediateSize));
    if (c.model_type == "qwen3_5")
        need(c.num_experts == 0, "model_type qwen3_5 is dense (qwen3_5_moe has the experts)");
}

void hybrid_fields_json(const TargetConfig& c, json& j) {
    const bool next = c.model_type == "qwen3_next";
    j["architectures"] = {next                            ? "Qwen3NextForCausalLM"
                          : c.model_type == "qwen3_5_moe" ? "Qwen3_5MoeForCausalLM"
                                                          : "Qwen3_5ForCausalLM"};
    // The text model alone, as transformers' ...ForCausalLM classes save it.
    j["model_type"] = next ? "qwen3_next" : c.model_type + "_text";
    j.erase("rope_theta");
    j.erase("rope_scaling");
    json rope = {{"rope_type", "default"},
                 {"rope_theta", c.rope.theta},
                 {"partial_rotary_factor", c.partial_rotary_factor}};
    if (!c.mrope_section.empty()) {
        rope["mrope_section"] = c.mrope_section;
        rope["mrope_interleaved"] = c.mrope_interleaved;
    }
    j["rope_parameters"] = rope;
    j["layer_types"] = c.layer_types;
    if (!next) j["attn_output_gate"] = c.attn_output_gate;
    j["linear_num_key_heads"] = c.linear_num_key_heads;
    j["linear_num_value_heads"] = c.linear_num_value_heads;
    j["linear_key_head_dim"] = c.linear_key_head_dim;
    j["linear_value_head_dim"] = c.linear_value_head_dim;
    j["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
    j["mamba_ssm_dtype"] = "float32";
    if (c.model_type == "qwen3_5") return;
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
    j["router_aux_loss_coef"] = 0.001;
    j["output_router_logits"] = false;
    if (!next) return;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
}

}  // namespace config_fields

}  // namespace dflash

// The mixture-of-experts and gpt-oss part of a target's config.json (qwen3_moe, gpt_oss): experts,
// router, dense/MoE layer split, sliding-window layers and attention sinks. Tested by
// tests/model/moe_config_test.cpp.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "model/hf_config_fields.h"

namespace dflash {

bool TargetConfig::is_moe_layer(int64_t i) const {
    if (num_experts <= 0) return false;
    if (gpt_oss()) return true;
    if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) != mlp_only_layers.end())
        return false;
    return decoder_sparse_step > 0 && (i + 1) % decoder_sparse_step == 0;
}

int64_t TargetConfig::num_moe_layers() const {
    int64_t n = 0;
    for (int64_t i = 0; i < num_hidden_layers; ++i) n += is_moe_layer(i) ? 1 : 0;
    return n;
}

int64_t TargetConfig::layer_window(int64_t i) const {
    const auto n = static_cast<int64_t>(layer_types.size());
    return i < n && layer_types[i] == "sliding_attention" ? sliding_window : 0;
}

namespace config_fields {

namespace {

constexpr const char* kSliding = "sliding_attention";
constexpr const char* kFull = "full_attention";

std::vector<int64_t> int_list(const json& j, const char* key) {
    if (!present(j, key)) return {};
    DF_CHECK(j[key].is_array(), "config key '{}' is {} (expected a list of integers)", key,
             j[key].dump());
    std::vector<int64_t> out;
    for (const auto& v : j[key]) out.push_back(as_int(v, key));
    return out;
}

// Router variants other models name: each is refused by its key rather than run as something
// it is not.
void refuse_other_routers(const json& j) {
    if (present(j, "scoring_func"))
        DF_CHECK(j["scoring_func"] == "softmax",
                 "config key 'scoring_func' is {}: this router kind is not supported (the "
                 "supported routers score experts with a softmax: qwen3_moe, gpt_oss)",
                 j["scoring_func"].dump());
    if (present(j, "topk_method"))
        DF_CHECK(j["topk_method"] == "greedy",
                 "config key 'topk_method' is {}: this router kind is not supported (the "
                 "supported routers take a plain top-k: qwen3_moe, gpt_oss)",
                 j["topk_method"].dump());
    for (const char* key :
         {"shared_expert_intermediate_size", "n_shared_experts", "num_shared_experts"})
        DF_CHECK(opt_int(j, key, 0) == 0,
                 "config key '{}' is {}: shared experts are not supported (qwen3_moe and gpt_oss "
                 "have none)",
                 key, j[key].dump());
}

// The expert count under either spelling; the two must agree where both are given.
int64_t expert_count(const json& j, const char* key, const char* other, int64_t fallback) {
    if (present(j, key) && present(j, other))
        DF_CHECK(as_int(j[key], key) == as_int(j[other], other),
                 "config keys '{}'={} and '{}'={} disagree on the number of experts", key,
                 j[key].dump(), other, j[other].dump());
    return opt_int(j, key, opt_int(j, other, fallback));
}

}  // namespace

void parse_moe_fields(const json& j, TargetConfig& c) {
    refuse_other_routers(j);
    if (present(j, "layer_types")) {
        DF_CHECK(j["layer_types"].is_array(),
                 "config key 'layer_types' is {} (expected a list of \"full_attention\" / "
                 "\"sliding_attention\")",
                 j["layer_types"].dump());
        DF_CHECK(j["layer_types"].size() <= static_cast<size_t>(kMaxLayers),
                 "config key 'layer_types' lists {} layers, more than {}", j["layer_types"].size(),
                 kMaxLayers);
        for (const auto& t : j["layer_types"])
            c.layer_types.push_back(t.is_string() ? t.get<std::string>() : t.dump());
    }
    if (c.model_type == "qwen3_moe") {
        // transformers' Qwen3MoeConfig defaults for absent keys.
        // transformers 5 writes num_local_experts, the Hub's configs num_experts.
        c.num_experts = expert_count(j, "num_experts", "num_local_experts", 128);
        c.num_experts_per_tok = opt_int(j, "num_experts_per_tok", 8);
        c.moe_intermediate_size = opt_int(j, "moe_intermediate_size", 768);
        c.norm_topk_prob = opt_bool(j, "norm_topk_prob", false);
        c.decoder_sparse_step = opt_int(j, "decoder_sparse_step", 1);
        c.mlp_only_layers = int_list(j, "mlp_only_layers");
        c.sliding_window = opt_int(j, "sliding_window", 0);
        return;
    }
    if (!c.gpt_oss()) return;
    // transformers' GptOssConfig defaults for absent keys; the per-expert width is its
    // intermediate_size, and it has no dense layers.
    c.num_experts = expert_count(j, "num_local_experts", "num_experts", 128);
    c.num_experts_per_tok = opt_int(j, "num_experts_per_tok", opt_int(j, "experts_per_token", 4));
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = true;  // its softmax runs over the k picked logits
    c.swiglu_limit = opt_double(j, "swiglu_limit", 7.0);
    c.sliding_window = opt_int(j, "sliding_window", 128);
    c.attention_sinks = true;
    c.attention_bias = opt_bool(j, "attention_bias", true);
    c.rms_norm_eps = opt_double(j, "rms_norm_eps", 1e-5);
    if (!present(j, "layer_types"))
        for (int64_t i = 0; i < std::clamp<int64_t>(c.num_hidden_layers, 0, kMaxLayers); ++i)
            c.layer_types.emplace_back(i % 2 == 0 ? kSliding : kFull);
}

void moe_problems(const TargetConfig& c, std::vector<std::string>& p) {
    auto need = [&](bool ok, std::string msg) {
        if (!ok) p.push_back(std::move(msg));
    };
    const bool moe_type = c.model_type == "qwen3_moe" || c.gpt_oss() ||
                          c.model_type == "qwen3_next" || c.model_type == "qwen3_5_moe";
    if (moe_type) {
        const char* e_key = c.gpt_oss() ? "num_local_experts" : "num_experts";
        need(c.num_experts >= 1 && c.num_experts <= kMaxExperts,
             fmt::format("{}={} is outside [1, {}]", e_key, c.num_experts, kMaxExperts));
        need(c.num_experts_per_tok >= 1,
             fmt::format("num_experts_per_tok={} must be at least 1", c.num_experts_per_tok));
        need(c.num_experts_per_tok <= c.num_experts,
             fmt::format("num_experts_per_tok={} exceeds {}={} (a token cannot use more "
                         "experts than there are)",
                         c.num_experts_per_tok, e_key, c.num_experts));
        need(c.moe_intermediate_size >= 1 && c.moe_intermediate_size <= kMaxIntermediateSize,
             fmt::format("{}={} is outside [1, {}]",
                         c.gpt_oss() ? "intermediate_size" : "moe_intermediate_size",
                         c.moe_intermediate_size, kMaxIntermediateSize));
        need(c.decoder_sparse_step >= 1,
             fmt::format("decoder_sparse_step={} must be at least 1", c.decoder_sparse_step));
        for (int64_t i : c.mlp_only_layers)
            need(i >= 0 && i < c.num_hidden_layers,
                 fmt::format("mlp_only_layers lists layer {} but the model has {} layers", i,
                             c.num_hidden_layers));
        need(std::isfinite(c.swiglu_limit) && c.swiglu_limit >= 0,
             fmt::format("swiglu_limit={} must be positive (or 0: no clamp)", c.swiglu_limit));
    } else {
        need(c.num_experts == 0 && c.swiglu_limit == 0 && !c.attention_sinks,
             fmt::format("model_type '{}' has no experts, clamped SwiGLU or attention sinks",
                         c.model_type));
    }
    if (c.gpt_oss()) {
        need(c.moe_intermediate_size == c.intermediate_size,
             fmt::format("gpt_oss experts are intermediate_size={} wide, not {}",
                         c.intermediate_size, c.moe_intermediate_size));
        need(c.attention_sinks, "gpt_oss attention has sinks");
        need(!c.qk_norm, "gpt_oss attention has no q_norm/k_norm");
    }
    // The hybrid families' layer_types (linear / full attention): hybrid_problems.
    if (c.layer_types.empty() || c.hybrid()) return;
    need(static_cast<int64_t>(c.layer_types.size()) == c.num_hidden_layers,
         fmt::format("layer_types lists {} layers but num_hidden_layers={}", c.layer_types.size(),
                     c.num_hidden_layers));
    bool sliding = false;
    for (size_t i = 0; i < c.layer_types.size(); ++i) {
        const std::string& t = c.layer_types[i];
        need(t == kFull || t == kSliding,
             fmt::format("layer_types[{}] is '{}' (expected \"{}\" or \"{}\")", i, t, kFull,
                         kSliding));
        sliding = sliding || t == kSliding;
    }
    if (!sliding) return;
    need(c.gpt_oss(), fmt::format("layer_types has sliding-window layers, which model_type '{}' "
                                  "does not use (only gpt_oss does)",
                                  c.model_type));
    need(c.sliding_window >= 1,
         fmt::format("sliding_window={} must be at least 1 (the keys a sliding layer sees, its "
                     "own included)",
                     c.sliding_window));
}

void moe_fields_json(const TargetConfig& c, json& j) {
    if (!c.layer_types.empty()) j["layer_types"] = c.layer_types;
    if (c.gpt_oss()) {
        j["num_local_experts"] = c.num_experts;
        j["num_experts_per_tok"] = c.num_experts_per_tok;
        j["swiglu_limit"] = c.swiglu_limit;
        j["sliding_window"] = c.sliding_window;
        j["router_aux_loss_coef"] = 0.9;
        j["output_router_logits"] = false;
        return;
    }
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    j["router_aux_loss_coef"] = 0.001;
    j["output_router_logits"] = false;
    j["max_window_layers"] = c.num_hidden_layers;
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
}

}  // namespace config_fields

}  // namespace dflash

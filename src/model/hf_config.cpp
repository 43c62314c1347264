// HF config.json for targets and DFlash drafters. Tested by tests/model/hf_config_test.cpp.
#include "model/hf_config.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "core/atomic_file.h"
#include "core/checkpoint_io.h"
#include "core/error.h"
#include "model/hf_config_fields.h"

namespace dflash {

namespace {

using nlohmann::json;
using namespace config_fields;

// bos/eos: absent or null -> none; an integer; or a list (Llama-3.1 lists three end-of-turn ids).
std::vector<int64_t> token_ids(const json& j, const char* key) {
    if (!present(j, key)) return {};
    const json& v = j[key];
    if (!v.is_array()) return {as_int(v, key)};
    std::vector<int64_t> ids;
    for (const auto& x : v) ids.push_back(as_int(x, key));
    return ids;
}

int64_t token_id(const json& j, const char* key) {
    const auto ids = token_ids(j, key);
    return ids.empty() ? -1 : ids.front();
}

// ---- RoPE -------------------------------------------------------------------------------------

RopeScaling parse_rope_scaling(const json& s) {
    DF_CHECK(s.is_object(), "rope_scaling is {} (expected null or an object)", s.dump());
    std::string type;
    if (s.contains("rope_type") && s["rope_type"].is_string()) {
        type = s["rope_type"].get<std::string>();
    } else if (s.contains("type") && s["type"].is_string()) {
        type = s["type"].get<std::string>();
    }
    DF_CHECK(!type.empty(), "rope_scaling {} has no \"rope_type\" (or \"type\")", s.dump());
    RopeScaling r;
    if (type == "default") return r;
    constexpr const char* kWhat = "rope_scaling";
    if (type == "linear") {
        r.type = RopeScalingType::linear;
        r.factor = req_double(s, "factor", kWhat);
        return r;
    }
    if (type == "yarn") {
        // transformers' defaults: beta_fast 32, beta_slow 1 (a 0 too), truncate true, the original
        // context max_position_embeddings (filled in by parse_rope when absent here).
        for (const char* key : {"mscale", "mscale_all_dim"})
            DF_CHECK(!present(s, key) || opt_double(s, key, 0.0) == 0.0,
                     "rope_scaling (yarn) sets '{}' = {}; only the default attention factor (or "
                     "an explicit attention_factor) is supported",
                     key, s[key].dump());
        r.type = RopeScalingType::yarn;
        r.factor = req_double(s, "factor", kWhat);
        r.original_max_position = opt_int(s, "original_max_position_embeddings", 0);
        r.beta_fast = opt_double(s, "beta_fast", 0.0);
        if (r.beta_fast == 0.0) r.beta_fast = 32.0;
        r.beta_slow = opt_double(s, "beta_slow", 0.0);
        if (r.beta_slow == 0.0) r.beta_slow = 1.0;
        r.truncate = opt_bool(s, "truncate", true);
        r.attention_factor = opt_double(s, "attention_factor", 0.0);
        return r;
    }
    DF_CHECK(type == "llama3",
             "rope_scaling type '{}' is unsupported (supported: default, linear, llama3, yarn); "
             "targets using it cannot be loaded yet",
             type);
    r.type = RopeScalingType::llama3;
    r.factor = req_double(s, "factor", kWhat);
    r.low_freq_factor = req_double(s, "low_freq_factor", kWhat);
    r.high_freq_factor = req_double(s, "high_freq_factor", kWhat);
    r.original_max_position = req_int(s, "original_max_position_embeddings", kWhat);
    return r;
}

// transformers < 5 writes rope_theta + rope_scaling; 5.x writes one rope_parameters object holding
// rope_theta and rope_type. Both are read.
RopeConfig parse_rope(const json& j) {
    RopeConfig r;
    r.theta = 10000.0;  // HF's default for both Llama and Qwen3
    const bool has_params = present(j, "rope_parameters") && j["rope_parameters"].is_object();
    if (has_params) r.theta = opt_double(j["rope_parameters"], "rope_theta", r.theta);
    r.theta = opt_double(j, "rope_theta", r.theta);
    if (present(j, "rope_scaling")) {
        r.scaling = parse_rope_scaling(j["rope_scaling"]);
    } else if (has_params && j["rope_parameters"].contains("rope_type")) {
        r.scaling = parse_rope_scaling(j["rope_parameters"]);
    }
    if (r.scaling.type == RopeScalingType::yarn && r.scaling.original_max_position == 0)
        r.scaling.original_max_position = opt_int(j, "max_position_embeddings", 0);
    return r;
}

json rope_scaling_json(const RopeScaling& s) {
    switch (s.type) {
        case RopeScalingType::none:
            return nullptr;
        case RopeScalingType::linear:
            return {{"rope_type", "linear"}, {"factor", s.factor}};
        case RopeScalingType::llama3:
            return {{"rope_type", "llama3"},
                    {"factor", s.factor},
                    {"low_freq_factor", s.low_freq_factor},
                    {"high_freq_factor", s.high_freq_factor},
                    {"original_max_position_embeddings", s.original_max_position}};
        case RopeScalingType::yarn: {
            json j = {{"rope_type", "yarn"},
                      {"factor", s.factor},
                      {"original_max_position_embeddings", s.original_max_position},
                      {"beta_fast", s.beta_fast},
                      {"beta_slow", s.beta_slow},
                      {"truncate", s.truncate}};
            if (s.attention_factor > 0) j["attention_factor"] = s.attention_factor;
            return j;
        }
    }
    return nullptr;
}

// ---- shared parsing ---------------------------------------------------------------------------

// The per-layer fields every config shares; `model_type` decides qk_norm. No validation here.
// allow_sliding: DFlash2 drafters use sliding-window layers (the drafter's attention honours it).
TargetConfig parse_layer_fields(const json& j, const std::string& model_type, const char* what,
                                bool allow_sliding = false) {
    DF_CHECK(j.is_object(), "config.json is {} (expected an object)", j.type_name());
    TargetConfig c;
    c.model_type = model_type;
    c.qk_norm =
        model_type == "qwen3" || model_type == "qwen3_moe" || is_hybrid_model_type(model_type);
    c.hidden_size = req_int(j, "hidden_size", what);
    c.intermediate_size = req_int(j, "intermediate_size", what);
    c.num_hidden_layers = req_int(j, "num_hidden_layers", what);
    c.num_attention_heads = req_int(j, "num_attention_heads", what);
    c.num_key_value_heads = opt_int(j, "num_key_value_heads", c.num_attention_heads);
    c.head_dim = opt_int(j, "head_dim",
                         c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
    c.vocab_size = req_int(j, "vocab_size", what);
    c.max_position_embeddings =
        opt_int(j, "max_position_embeddings", model_type == "llama" ? 2048 : 32768);
    c.rms_norm_eps = opt_double(j, "rms_norm_eps", 1e-6);
    c.rope = parse_rope(j);
    c.tie_word_embeddings = opt_bool(j, "tie_word_embeddings", false);
    c.attention_bias = opt_bool(j, "attention_bias", false);
    c.bos_token_id = token_id(j, "bos_token_id");
    const auto eos = token_ids(j, "eos_token_id");
    c.eos_token_id = eos.empty() ? -1 : eos.front();
    if (eos.size() > 1) c.extra_eos_token_ids.assign(eos.begin() + 1, eos.end());
    for (const char* key : {"torch_dtype", "dtype"}) {
        if (present(j, key) && j[key].is_string()) c.torch_dtype = j[key].get<std::string>();
    }
    // gpt_oss's activation is its own clamped SwiGLU whatever hidden_act says.
    if (present(j, "hidden_act") && model_type != "gpt_oss") {
        DF_CHECK(j["hidden_act"] == "silu",
                 "hidden_act is {} but only \"silu\" (SwiGLU) is supported",
                 j["hidden_act"].dump());
    }
    DF_CHECK(allow_sliding || !opt_bool(j, "use_sliding_window", false),
             "use_sliding_window is true: sliding-window attention is not supported");
    return c;
}

json layer_fields_json(const TargetConfig& c) {
    return {
        {"hidden_size", c.hidden_size},
        {"intermediate_size", c.intermediate_size},
        {"num_hidden_layers", c.num_hidden_layers},
        {"num_attention_heads", c.num_attention_heads},
        {"num_key_value_heads", c.num_key_value_heads},
        {"head_dim", c.head_dim},
        {"hidden_act", "silu"},
        {"rms_norm_eps", c.rms_norm_eps},
        {"rope_theta", c.rope.theta},
        {"rope_scaling", rope_scaling_json(c.rope.scaling)},
        {"max_position_embeddings", c.max_position_embeddings},
        {"attention_bias", c.attention_bias},
        {"tie_word_embeddings", c.tie_word_embeddings},
        {"vocab_size", c.vocab_size},
    };
}

json id_or_null(int64_t id) {
    return id < 0 ? json(nullptr) : json(id);
}

std::string joined(const std::vector<std::string>& problems) {
    return fmt::format("{}", fmt::join(problems, "; "));
}

std::filesystem::path config_path(const std::filesystem::path& dir) {
    const auto p = dir / "config.json";
    DF_CHECK(std::filesystem::exists(p), "no config.json in '{}' (an HF model directory has one)",
             dir.string());
    return p;
}

// Runs `parse` on dir/config.json; errors are prefixed with the file so the user knows which one.
template <typename Fn>
auto load_config(const std::filesystem::path& dir, Fn parse) {
    const auto path = config_path(dir);
    const json j = read_json_file(path);
    try {
        return parse(j);
    } catch (const Error& e) {
        throw Error(fmt::format("{}: {}", path.string(), e.what()));
    }
}

// Note [Last target layer]: engines disagree on the feature of the last target layer.
// transformers' last hidden_states entry is taken after the final norm, so transformers-based code
// (z-lab's reference decoder, SpecForge training) feeds the normed state; SGLang captures "the
// input of layer id+1", which does not exist for the last layer. A drafter trained on it here
// (raw output) loses acceptance when served elsewhere (docs/formats.md "DFlash drafter directory"),
// so no config may name it.
std::string last_layer_problem(size_t i, int64_t id, int64_t num_target_layers) {
    return fmt::format(
        "target_layer_ids[{}]={} is the target's last layer; engines disagree on its feature "
        "(transformers-based code sees it after the final norm, SGLang cannot capture it), so a "
        "drafter reading it would lose acceptance when served elsewhere; pick ids in 0..{}, e.g. "
        "the default [{}] (drafter.target_layer_ids empty)",
        i, id, num_target_layers - 2,
        fmt::join(default_target_layer_ids(num_target_layers,
                                           std::clamp<int64_t>(num_target_layers - 3, 1, 5)),
                  ", "));
}

bool names_architecture(const json& j, const char* arch) {
    if (!j.contains("architectures") || !j["architectures"].is_array()) return false;
    for (const auto& a : j["architectures"])
        if (a == arch) return true;
    return false;
}

// docs/formats.md "DFlash2 drafter directory": a DFlash2 key is read from dflash_config first, then
// the top level.
const json* dflash2_key(const json& j, const json& dc, const char* key) {
    if (present(dc, key)) return &dc[key];
    if (present(j, key)) return &j[key];
    return nullptr;
}

int64_t dflash2_int(const json& j, const json& dc, const char* key) {
    const json* v = dflash2_key(j, dc, key);
    DF_CHECK(v != nullptr,
             "DFlash2 drafter config.json has no '{}' (in dflash_config or top-level; released "
             "drafters use conv_kernel_size 2, conv_group_size 16, selector_rank 256, "
             "selector_top_k 16)",
             key);
    return as_int(*v, key);
}

double dflash2_real(const json& j, const json& dc, const char* key, double fallback) {
    const json* v = dflash2_key(j, dc, key);
    if (v == nullptr) return fallback;
    DF_CHECK(v->is_number(), "config key '{}' is {} (expected a number)", key, v->dump());
    return v->get<double>();
}

// The DFlash2 keys (the attention layout: parse_attention_layout).
void parse_dflash2(const json& j, const json& dc, DrafterConfig& d) {
    Dflash2Config& c = d.d2;
    c.conv_kernel_size = dflash2_int(j, dc, "conv_kernel_size");
    c.conv_group_size = dflash2_int(j, dc, "conv_group_size");
    c.selector_rank = dflash2_int(j, dc, "selector_rank");
    c.selector_top_k = dflash2_int(j, dc, "selector_top_k");
    c.output_multiplier = dflash2_real(j, dc, "output_multiplier", 1.0);
    // Absent or <= 0 switches the cap off (the reference's rule).
    c.final_logit_softcapping = std::max(0.0, dflash2_real(j, dc, "final_logit_softcapping", 0.0));
    c.input_embedding_scale = dflash2_real(j, dc, "input_embedding_scale", 1.0);
}

// The attention layout of every drafter (layer_types, sliding_window, is_causal; docs/formats.md
// "DFlash drafter directory").
void parse_attention_layout(const json& j, const json& dc, DrafterConfig& d) {
    const int64_t L = d.layer.num_hidden_layers;
    DF_CHECK(L >= 1 && L <= kMaxLayers, "num_hidden_layers={} is outside [1, {}]", L, kMaxLayers);
    d.sliding_layers.assign(L, false);
    if (present(j, "layer_types")) {
        const json& lt = j["layer_types"];
        DF_CHECK(lt.is_array() && static_cast<int64_t>(lt.size()) == L,
                 "layer_types {} must list one entry per draft layer ({})", lt.dump(), L);
        for (int64_t i = 0; i < L; ++i) {
            DF_CHECK(lt[i] == "full_attention" || lt[i] == "sliding_attention",
                     "layer_types[{}] is {} (expected \"full_attention\" or "
                     "\"sliding_attention\")",
                     i, lt[i].dump());
            d.sliding_layers[i] = lt[i] == "sliding_attention";
        }
    }
    d.sliding_window = opt_int(j, "sliding_window", 0);
    if (present(j, "is_causal")) {
        d.is_causal = opt_bool(j, "is_causal", false) ? 1 : 0;
    } else if (present(dc, "causal")) {
        d.is_causal = opt_bool(dc, "causal", false) ? 1 : 0;
    }
}

std::vector<std::string> dflash2_problems(const DrafterConfig& d) {
    std::vector<std::string> p;
    auto need = [&](bool ok, std::string msg) {
        if (!ok) p.push_back(std::move(msg));
    };
    const Dflash2Config& c = d.d2;
    const int64_t top_k_max = std::min(kMaxSelectorTopK, d.layer.vocab_size);
    need(c.conv_kernel_size >= 1 && c.conv_kernel_size <= d.block_size,
         fmt::format("conv_kernel_size={} is outside [1, block_size={}] (taps never cross a "
                     "block; released drafters use 2)",
                     c.conv_kernel_size, d.block_size));
    need(c.conv_group_size >= 1 && c.conv_group_size <= d.layer.hidden_size &&
             d.layer.hidden_size % std::max<int64_t>(c.conv_group_size, 1) == 0,
         fmt::format("conv_group_size={} must divide hidden_size={} (channels come in groups of "
                     "that many; released drafters use 16)",
                     c.conv_group_size, d.layer.hidden_size));
    need(c.selector_rank >= 1 && c.selector_rank <= kMaxSelectorRank,
         fmt::format("selector_rank={} is outside [1, {}] (released drafters use 256)",
                     c.selector_rank, kMaxSelectorRank));
    need(c.selector_top_k >= 1 && c.selector_top_k <= top_k_max,
         fmt::format("selector_top_k={} is outside [1, {}] (at most the vocabulary; released "
                     "drafters use 16)",
                     c.selector_top_k, top_k_max));
    need(std::isfinite(c.output_multiplier) && c.output_multiplier > 0,
         fmt::format("output_multiplier={} must be positive (top-K is taken before it is applied)",
                     c.output_multiplier));
    need(std::isfinite(c.final_logit_softcapping),
         fmt::format("final_logit_softcapping={} must be finite", c.final_logit_softcapping));
    need(std::isfinite(c.input_embedding_scale),
         fmt::format("input_embedding_scale={} must be finite", c.input_embedding_scale));
    return p;
}

// Every drafter's attention layout: a sliding layer needs a window.
std::vector<std::string> attention_layout_problems(const DrafterConfig& d) {
    std::vector<std::string> p;
    auto need = [&](bool ok, std::string msg) {
        if (!ok) p.push_back(std::move(msg));
    };
    need(d.sliding_window >= 0,
         fmt::format("sliding_window={} must be positive (or null: no window)", d.sliding_window));
    need(static_cast<int64_t>(d.sliding_layers.size()) == d.layer.num_hidden_layers,
         fmt::format("layer_types lists {} layers but num_hidden_layers is {}",
                     d.sliding_layers.size(), d.layer.num_hidden_layers));
    for (size_t i = 0; i < d.sliding_layers.size(); ++i) {
        if (!d.sliding_layers[i]) continue;
        need(d.sliding_window > 0,
             fmt::format("layer_types[{}] is \"sliding_attention\" but sliding_window is {}: a "
                         "sliding layer needs a window W > 0 (the keys each query sees)",
                         i, d.sliding_window));
        break;
    }
    return p;
}

}  // namespace

// ---- TargetConfig -----------------------------------------------------------------------------

std::vector<std::string> TargetConfig::problems() const {
    std::vector<std::string> p;
    auto need = [&](bool ok, std::string msg) {
        if (!ok) p.push_back(std::move(msg));
    };
    need(model_type == "qwen3" || model_type == "llama" || model_type == "qwen2" ||
             model_type == "qwen3_moe" || model_type == "gpt_oss" || hybrid(),
         fmt::format("model_type '{}' is not supported (supported: qwen3, qwen2, llama, "
                     "qwen3_moe, gpt_oss, qwen3_next, qwen3_5, qwen3_5_moe)",
                     model_type));
    const std::pair<const char*, int64_t> dims[] = {
        {"hidden_size", hidden_size},
        {"intermediate_size", intermediate_size},
        {"num_hidden_layers", num_hidden_layers},
        {"num_attention_heads", num_attention_heads},
        {"num_key_value_heads", num_key_value_heads},
        {"head_dim", head_dim},
        {"vocab_size", vocab_size},
        {"max_position_embeddings", max_position_embeddings}};
    for (const auto& [name, v] : dims) need(v > 0, fmt::format("{}={} must be positive", name, v));
    const std::pair<const char*, int64_t> caps[] = {
        {"hidden_size", kMaxHiddenSize},    {"intermediate_size", kMaxIntermediateSize},
        {"num_hidden_layers", kMaxLayers},  {"num_attention_heads", kMaxHeads},
        {"num_key_value_heads", kMaxHeads}, {"head_dim", kMaxHeadDim},
        {"vocab_size", kMaxVocabSize},      {"max_position_embeddings", kMaxPositions}};
    for (size_t i = 0; i < std::size(caps); ++i)
        need(dims[i].second <= caps[i].second,
             fmt::format("{}={} is above {}, the largest supported; is config.json damaged?",
                         dims[i].first, dims[i].second, caps[i].second));
    if (num_attention_heads > 0 && num_key_value_heads > 0)
        need(num_attention_heads % num_key_value_heads == 0,
             fmt::format("num_attention_heads={} is not a multiple of num_key_value_heads={} "
                         "(grouped-query attention shares each kv head by a whole group)",
                         num_attention_heads, num_key_value_heads));
    need(head_dim % 2 == 0,
         fmt::format("head_dim={} must be even for rotary embeddings", head_dim));
    need(rms_norm_eps > 0, fmt::format("rms_norm_eps={} must be positive", rms_norm_eps));
    need(rope.theta > 0, fmt::format("rope_theta={} must be positive", rope.theta));
    if (rope.scaling.type != RopeScalingType::none)
        need(rope.scaling.factor > 0,
             fmt::format("rope_scaling.factor={} must be positive", rope.scaling.factor));
    if (rope.scaling.type == RopeScalingType::llama3) {
        need(rope.scaling.high_freq_factor > rope.scaling.low_freq_factor,
             fmt::format("rope_scaling high_freq_factor={} must exceed low_freq_factor={}",
                         rope.scaling.high_freq_factor, rope.scaling.low_freq_factor));
        need(rope.scaling.original_max_position > 0,
             fmt::format("rope_scaling.original_max_position_embeddings={} must be positive",
                         rope.scaling.original_max_position));
    }
    need(qk_norm == (model_type == "qwen3" || model_type == "qwen3_moe" || hybrid()),
         fmt::format("qk_norm={} does not match model_type '{}' (qwen3, qwen3_moe and the hybrid "
                     "families have q_norm/k_norm, llama, qwen2 and gpt_oss have not)",
                     qk_norm, model_type));
    if (rope.scaling.type == RopeScalingType::yarn) {
        need(rope.scaling.original_max_position > 0,
             fmt::format("rope_scaling.original_max_position_embeddings={} must be positive",
                         rope.scaling.original_max_position));
        need(rope.scaling.beta_fast > rope.scaling.beta_slow && rope.scaling.beta_slow > 0,
             fmt::format("rope_scaling (yarn) beta_fast={} must exceed beta_slow={} > 0",
                         rope.scaling.beta_fast, rope.scaling.beta_slow));
        need(rope.scaling.attention_factor >= 0,
             fmt::format("rope_scaling.attention_factor={} must be positive",
                         rope.scaling.attention_factor));
    }
    moe_problems(*this, p);
    if (hybrid()) hybrid_problems(*this, p);
    std::vector<std::pair<std::string, int64_t>> ids = {{"bos_token_id", bos_token_id},
                                                        {"eos_token_id", eos_token_id}};
    for (int64_t id : extra_eos_token_ids) ids.emplace_back("eos_token_id", id);
    for (int64_t id : generation_eos_token_ids)
        ids.emplace_back("generation_config.json eos_token_id", id);
    for (const auto& [name, id] : ids) {
        need(id >= -1 && (vocab_size <= 0 || id < vocab_size),
             fmt::format("{}={} is outside the vocabulary (0..{})", name, id, vocab_size - 1));
    }
    need(torch_dtype == "bfloat16" || torch_dtype == "float32" || torch_dtype == "float16",
         fmt::format("torch_dtype '{}' is not one of bfloat16, float16, float32", torch_dtype));
    return p;
}

TargetConfig TargetConfig::from_json_unchecked(const json& j) {
    DF_CHECK(j.is_object() && present(j, "model_type") && j["model_type"].is_string(),
             "config.json has no \"model_type\" string (expected \"qwen3\" or \"llama\")");
    if (is_hybrid_model_type(j["model_type"].get<std::string>())) {
        const HybridSource src = hybrid_source(j);
        json text = *src.text;
        // qwen3_5_moe has no dense layer and may leave intermediate_size out.
        if (src.model_type == "qwen3_5_moe" && !present(text, "intermediate_size"))
            text["intermediate_size"] = opt_int(text, "moe_intermediate_size", 512);
        TargetConfig c = parse_layer_fields(text, src.model_type, "a target model");
        parse_hybrid_fields(text, j, src.wrapper, c);
        return c;
    }
    TargetConfig c = parse_layer_fields(j, j["model_type"].get<std::string>(), "a target model");
    parse_moe_fields(j, c);
    return c;
}

TargetConfig TargetConfig::from_json(const json& j) {
    TargetConfig c = from_json_unchecked(j);
    const auto p = c.problems();
    DF_CHECK(p.empty(), "invalid {} config: {}", c.model_type, joined(p));
    return c;
}

json TargetConfig::to_json() const {
    const bool llama = model_type == "llama";
    json j = layer_fields_json(*this);
    j["architectures"] = {llama                       ? "LlamaForCausalLM"
                          : model_type == "qwen2"     ? "Qwen2ForCausalLM"
                          : model_type == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                          : gpt_oss()                 ? "GptOssForCausalLM"
                                                      : "Qwen3ForCausalLM"};
    j["model_type"] = model_type;
    j["attention_dropout"] = 0.0;
    j["bos_token_id"] = id_or_null(bos_token_id);
    j["eos_token_id"] = id_or_null(eos_token_id);
    if (eos_token_id >= 0 && !extra_eos_token_ids.empty()) {
        j["eos_token_id"] = json::array({eos_token_id});
        for (int64_t id : extra_eos_token_ids) j["eos_token_id"].push_back(id);
    }
    j["initializer_range"] = 0.02;
    j["torch_dtype"] = torch_dtype;
    j["use_cache"] = true;
    if (hybrid()) {
        hybrid_fields_json(*this, j);
    } else if (llama) {
        j["mlp_bias"] = false;
        j["pretraining_tp"] = 1;
    } else if (moe() || gpt_oss()) {
        moe_fields_json(*this, j);
    } else {
        j["max_window_layers"] = num_hidden_layers;
        j["sliding_window"] = nullptr;
        j["use_sliding_window"] = false;
    }
    return j;
}

std::vector<int64_t> TargetConfig::stop_token_ids() const {
    std::vector<int64_t> out;
    auto add = [&](int64_t id) {
        if (id >= 0 && std::find(out.begin(), out.end(), id) == out.end()) out.push_back(id);
    };
    add(eos_token_id);
    for (int64_t id : extra_eos_token_ids) add(id);
    for (int64_t id : generation_eos_token_ids) add(id);
    return out;
}

TargetConfig TargetConfig::load(const std::filesystem::path& dir) {
    TargetConfig c = load_config(dir, [](const json& j) {
        DF_CHECK(!is_drafter_config_json(j),
                 "this is a DFlash drafter config (architectures DFlashDraftModel), not a target "
                 "model");
        return TargetConfig::from_json(j);
    });
    const auto gen = dir / "generation_config.json";
    if (std::filesystem::exists(gen)) {
        const json g = read_json_file(gen);
        try {
            DF_CHECK(g.is_object(), "the file is a JSON {} (expected an object)", g.type_name());
            c.generation_eos_token_ids = token_ids(g, "eos_token_id");
            const auto p = c.problems();
            DF_CHECK(p.empty(), "{}", joined(p));
        } catch (const Error& e) {
            throw Error(fmt::format("{}: {}", gen.string(), e.what()));
        }
    }
    return c;
}

void TargetConfig::save(const std::filesystem::path& dir) const {
    const auto p = problems();
    DF_CHECK(p.empty(), "refusing to save an invalid target config: {}", joined(p));
    std::filesystem::create_directories(dir);
    write_text_atomic(dir / "config.json", to_json().dump(2) + "\n");
}

// ---- DrafterConfig ----------------------------------------------------------------------------

std::vector<std::string> DrafterConfig::problems() const {
    std::vector<std::string> p = layer.problems();
    auto need = [&](bool ok, std::string msg) {
        if (!ok) p.push_back(std::move(msg));
    };
    need(layer.model_type == "qwen3" && layer.qk_norm && !layer.attention_bias,
         "DFlash drafter layers are Qwen3-style (q_norm/k_norm, no biases)");
    need(block_size >= 2 && block_size <= kMaxBlockSize,
         fmt::format("block_size={} is outside [2, {}] (the anchor plus at least one drafted "
                     "token, as the drafter.block_size setting; released drafters use 16)",
                     block_size, kMaxBlockSize));
    need(mask_token_id >= 0 && mask_token_id < layer.vocab_size,
         fmt::format("mask_token_id={} is outside the target vocabulary (0..{}); pick a reserved "
                     "id inside it (Qwen3: 151669, the id of <|MASK|>)",
                     mask_token_id, layer.vocab_size - 1));
    need(num_target_layers >= 1 && num_target_layers <= kMaxLayers,
         fmt::format("num_target_layers={} is outside [1, {}]", num_target_layers, kMaxLayers));
    need(!target_layer_ids.empty(), "target_layer_ids is empty (released drafters use 5 ids)");
    need(num_features() <= kMaxTargetFeatures,
         fmt::format("target_layer_ids has {} ids; at most {} are supported", num_features(),
                     kMaxTargetFeatures));
    for (size_t i = 0; i < target_layer_ids.size(); ++i) {
        const int64_t id = target_layer_ids[i];
        need(id >= 0 && id < num_target_layers,
             fmt::format("target_layer_ids[{}]={} but the target has {} layers (ids 0..{})", i, id,
                         num_target_layers, num_target_layers - 1));
        if (num_target_layers >= 2 && id == num_target_layers - 1)
            p.push_back(last_layer_problem(i, id, num_target_layers));
    }
    if (dflash2())
        for (auto& problem : dflash2_problems(*this)) p.push_back(std::move(problem));
    if (dspark())
        for (auto& problem : dspark_problems(*this)) p.push_back(std::move(problem));
    for (auto& problem : attention_layout_problems(*this)) p.push_back(std::move(problem));
    return p;
}

DrafterConfig DrafterConfig::from_json(const json& j) {
    DrafterConfig d = from_json_unchecked(j);
    const auto p = d.problems();
    DF_CHECK(p.empty(), "invalid {} drafter config: {}",
             d.dspark() ? "DSpark" : (d.dflash2() ? "DFlash2" : "DFlash"), joined(p));
    return d;
}

DrafterConfig DrafterConfig::from_json_unchecked(const json& j) {
    DF_CHECK(j.is_object(), "drafter config.json is {} (expected an object)", j.type_name());
    if (present(j, "speculators_model_type")) return from_speculators_json(j);
    DrafterConfig d;
    if (names_architecture(j, "DFlash2DraftModel")) d.arch = DrafterArch::dflash2;
    if (is_dspark_config_json(j)) d.arch = DrafterArch::dspark;
    d.layer = parse_layer_fields(j, "qwen3", "a DFlash drafter", true);
    json dc = present(j, "dflash_config") ? j["dflash_config"] : json::object();
    DF_CHECK(dc.is_object(), "dflash_config is {} (expected an object)", dc.dump());
    // DeepSpec's DSpark configs keep these two top-level (no dflash_config at all).
    if (d.dspark())
        for (const char* key : {"mask_token_id", "target_layer_ids"})
            if (!present(dc, key) && present(j, key)) dc[key] = j[key];
    // SGLang also accepts block_size and num_target_layers inside dflash_config. Where both
    // places hold one, engines differ in which they read, so they must agree.
    auto top_or_inner = [&](const char* key) -> int64_t {
        const std::string inner = fmt::format("dflash_config.{}", key);
        if (present(j, key)) {
            const int64_t top = as_int(j[key], key);
            if (present(dc, key)) {
                const int64_t in = as_int(dc[key], inner);
                DF_CHECK(top == in,
                         "{}={} at the top level but {}={}; engines differ in which one they "
                         "read, so the two must agree",
                         key, top, inner, in);
            }
            return top;
        }
        DF_CHECK(present(dc, key),
                 "drafter config.json has no '{}' (top-level or in dflash_config)", key);
        return as_int(dc[key], inner);
    };
    d.block_size = top_or_inner("block_size");
    d.num_target_layers = top_or_inner("num_target_layers");
    DF_CHECK(present(dc, "mask_token_id"),
             "drafter config.json has no dflash_config.mask_token_id (Qwen3 drafters use 151669, "
             "the id of <|MASK|>)");
    d.mask_token_id = as_int(dc["mask_token_id"], "dflash_config.mask_token_id");
    if (present(dc, "target_layer_ids")) {
        DF_CHECK(dc["target_layer_ids"].is_array(),
                 "dflash_config.target_layer_ids is {} (expected a list of layer ids)",
                 dc["target_layer_ids"].dump());
        DF_CHECK(dc["target_layer_ids"].size() <= static_cast<size_t>(kMaxTargetFeatures),
                 "dflash_config.target_layer_ids has {} ids; at most {} are supported",
                 dc["target_layer_ids"].size(), kMaxTargetFeatures);
        for (const auto& v : dc["target_layer_ids"])
            d.target_layer_ids.push_back(as_int(v, "dflash_config.target_layer_ids"));
    } else {
        // Historic drafters: one target feature per draft layer. The counts size a vector here,
        // so they are checked first.
        DF_CHECK(d.num_target_layers >= 1 && d.num_target_layers <= kMaxLayers &&
                     d.layer.num_hidden_layers >= 1 &&
                     d.layer.num_hidden_layers <= kMaxTargetFeatures,
                 "num_target_layers={} / num_hidden_layers={} are outside [1, {}] / [1, {}]",
                 d.num_target_layers, d.layer.num_hidden_layers, kMaxLayers, kMaxTargetFeatures);
        d.target_layer_ids =
            default_target_layer_ids(d.num_target_layers, d.layer.num_hidden_layers);
    }
    if (d.dflash2()) parse_dflash2(j, dc, d);
    if (d.dspark()) parse_dspark_fields(j, dc, d);
    parse_attention_layout(j, dc, d);
    return d;
}

json DrafterConfig::to_json() const {
    json j = layer_fields_json(layer);
    j["architectures"] = {"DFlashDraftModel"};
    j["auto_map"] = {{"AutoModel", "dflash.DFlashDraftModel"}};
    j["model_type"] = "qwen3";
    j["block_size"] = block_size;
    j["dflash_config"] = {{"mask_token_id", mask_token_id}, {"target_layer_ids", target_layer_ids}};
    j["num_target_layers"] = num_target_layers;
    j["dtype"] = layer.torch_dtype;
    attention_layout_json(j);
    if (dflash2()) dflash2_json(j);
    if (dspark()) dspark_json(j);
    return j;
}

// Per-layer layer_types; sliding_window, use_sliding_window and max_window_layers as HF's Qwen3
// config spells a windowed model (layer_types decides which layers slide); is_causal when set.
void DrafterConfig::attention_layout_json(json& j) const {
    std::vector<std::string> types;
    for (int64_t l = 0; l < layer.num_hidden_layers; ++l)
        types.emplace_back(sliding(l) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    const bool any_sliding =
        std::find(sliding_layers.begin(), sliding_layers.end(), true) != sliding_layers.end();
    j["sliding_window"] = sliding_window > 0 ? json(sliding_window) : json(nullptr);
    j["use_sliding_window"] = any_sliding && sliding_window > 0;
    if (any_sliding || dflash2()) j["max_window_layers"] = layer.num_hidden_layers;
    if (is_causal >= 0) j["is_causal"] = is_causal == 1;
}
// The reference's layout (docs/formats.md "DFlash2 drafter directory"): the DFlash2 keys inside
// dflash_config (block_size too), the optional ones only when they are not their defaults,
// per-layer layer_types.
void DrafterConfig::dflash2_json(json& j) const {
    j["architectures"] = {"DFlash2DraftModel"};
    j.erase("auto_map");  // the reference's remote-code class name is not ours to promise
    json& dc = j["dflash_config"];
    dc["block_size"] = block_size;
    dc["conv_kernel_size"] = d2.conv_kernel_size;
    dc["conv_group_size"] = d2.conv_group_size;
    dc["selector_rank"] = d2.selector_rank;
    dc["selector_top_k"] = d2.selector_top_k;
    if (d2.output_multiplier != 1.0) dc["output_multiplier"] = d2.output_multiplier;
    if (d2.final_logit_softcapping > 0) dc["final_logit_softcapping"] = d2.final_logit_softcapping;
    if (d2.input_embedding_scale != 1.0) dc["input_embedding_scale"] = d2.input_embedding_scale;
}

bool DrafterConfig::sliding(int64_t l) const {
    return l >= 0 && l < static_cast<int64_t>(sliding_layers.size()) && sliding_layers[l];
}

// DFlash drafters: sliding layers causal, full layers bidirectional, whatever is_causal says (the
// sliding-window mask the DFlash trainers use; docs/training.md "Sliding-window drafter layers").
bool DrafterConfig::layer_causal(int64_t l) const {
    if (dflash2() && is_causal >= 0) return is_causal == 1;
    return sliding(l);
}

int64_t DrafterConfig::layer_window(int64_t l) const {
    return sliding(l) ? sliding_window : 0;
}

DrafterConfig DrafterConfig::load(const std::filesystem::path& dir) {
    return load_config(dir, [](const json& j) { return DrafterConfig::from_json(j); });
}

void DrafterConfig::save(const std::filesystem::path& dir) const {
    const auto p = problems();
    DF_CHECK(p.empty(), "refusing to save an invalid drafter config: {}", joined(p));
    std::filesystem::create_directories(dir);
    write_text_atomic(dir / "config.json", to_json().dump(2) + "\n");
}

// ---- helpers ----------------------------------------------------------------------------------

std::vector<int64_t> default_target_layer_ids(int64_t num_target_layers, int64_t n) {
    DF_CHECK(num_target_layers >= 2 && n >= 1,
             "cannot pick {} target layer(s) from a target with {} layer(s): a drafter reads "
             "layers other than the last (see target_layer_ids), so the target needs at least 2",
             n, num_target_layers);
    // The reference rule's [L/2] is the last layer when L == 2; its neighbour is used then.
    if (n == 1) return {std::min(num_target_layers / 2, num_target_layers - 2)};
    const int64_t start = 1, end = num_target_layers - 3;
    std::vector<int64_t> ids;
    for (int64_t i = 0; i < n; ++i) {
        const double x = static_cast<double>(start) +
                         static_cast<double>(i * (end - start)) / static_cast<double>(n - 1);
        ids.push_back(static_cast<int64_t>(std::nearbyint(x)));  // ties to even, like Python
    }
    // Like the reference, a shallow target can get a layer twice (L = 4, n = 2: [1, 1]);
    // make_drafter_config asks for few enough ids that its defaults never do.
    for (int64_t id : ids)
        DF_CHECK(id >= 0 && id < num_target_layers - 1,
                 "a target with {} layers is too shallow for {} evenly spread feature layers "
                 "below the last (got [{}]); give target_layer_ids explicitly or fewer features",
                 num_target_layers, n, fmt::join(ids, ", "));
    return ids;
}

DrafterConfig make_drafter_config(const TargetConfig& t, int64_t num_layers, int64_t block_size,
                                  int64_t mask_token_id, std::vector<int64_t> target_layer_ids) {
    DrafterConfig d;
    d.layer = t;
    d.layer.model_type = "qwen3";
    d.layer.qk_norm = true;
    d.layer.attention_bias = false;
    d.layer.num_hidden_layers = num_layers;
    // Drafter layers are dense full-attention Qwen3 layers whatever the target's are.
    d.layer.num_experts = d.layer.num_experts_per_tok = d.layer.moe_intermediate_size = 0;
    d.layer.norm_topk_prob = false;
    d.layer.decoder_sparse_step = 1;
    d.layer.mlp_only_layers.clear();
    d.layer.swiglu_limit = 0;
    d.layer.layer_types.clear();
    d.layer.sliding_window = 0;
    d.layer.attention_sinks = false;
    // Nor do they have the hybrid families' linear layers, partial rotary or gated attention.
    d.layer.partial_rotary_factor = 1.0;
    d.layer.attn_output_gate = false;
    d.layer.mrope_section.clear();
    d.layer.mrope_interleaved = false;
    d.layer.linear_num_key_heads = d.layer.linear_num_value_heads = 0;
    d.layer.linear_key_head_dim = d.layer.linear_value_head_dim = 0;
    d.layer.linear_conv_kernel_dim = 0;
    d.layer.shared_expert_intermediate_size = 0;
    d.layer.multimodal_wrapper = false;
    d.sliding_layers.assign(num_layers, false);  // full layers unless the caller slides some
    d.block_size = block_size;
    d.mask_token_id = mask_token_id;
    d.num_target_layers = t.num_hidden_layers;
    if (target_layer_ids.empty()) {
        // Step 1 between ids needs L-3 >= n; shallower targets get fewer features.
        const int64_t n = std::clamp<int64_t>(t.num_hidden_layers - 3, 1, 5);
        target_layer_ids = default_target_layer_ids(t.num_hidden_layers, n);
    }
    d.target_layer_ids = std::move(target_layer_ids);
    const auto p = d.problems();
    DF_CHECK(p.empty(), "cannot make a drafter config for this target: {}", joined(p));
    return d;
}

std::vector<std::string> drafter_target_mismatches(const DrafterConfig& d, const TargetConfig& t) {
    std::vector<std::string> p;
    if (d.layer.hidden_size != t.hidden_size)
        p.push_back(
            fmt::format("drafter hidden_size={} but the target's is {} (the drafter "
                        "reads target features and shares its embeddings)",
                        d.layer.hidden_size, t.hidden_size));
    if (d.layer.vocab_size != t.vocab_size)
        p.push_back(
            fmt::format("drafter vocab_size={} but the target's is {} (the drafter "
                        "shares the target's embeddings and lm_head)",
                        d.layer.vocab_size, t.vocab_size));
    if (d.num_target_layers != t.num_hidden_layers)
        p.push_back(fmt::format("drafter num_target_layers={} but the target has {} layers",
                                d.num_target_layers, t.num_hidden_layers));
    for (size_t i = 0; i < d.target_layer_ids.size(); ++i)
        if (d.target_layer_ids[i] >= t.num_hidden_layers)
            p.push_back(fmt::format(
                "target_layer_ids[{}]={} but the target has {} layers (ids "
                "0..{})",
                i, d.target_layer_ids[i], t.num_hidden_layers, t.num_hidden_layers - 1));
    return p;
}

bool is_drafter_config_json(const json& j) {
    if (!j.is_object()) return false;
    if (j.contains("dflash_config")) return true;
    return names_architecture(j, "DFlashDraftModel") ||
           names_architecture(j, "DFlash2DraftModel") || is_dspark_config_json(j);
}

}  // namespace dflash

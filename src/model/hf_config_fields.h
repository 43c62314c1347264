// Internal to hf_config.cpp and hf_config_moe.cpp: typed access to config.json values with errors
// that name the key and the value, and the mixture-of-experts / gpt-oss part of TargetConfig's
// reading, checking and writing. Tested by tests/model/hf_config_test.cpp and
// tests/model/moe_config_test.cpp.
#pragma once

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/hf_config.h"

namespace dflash::config_fields {

using nlohmann::json;

inline bool present(const json& j, const char* key) {
    return j.contains(key) && !j[key].is_null();
}

inline int64_t as_int(const json& v, const std::string& key) {
    if (v.is_number_integer()) return v.get<int64_t>();
    if (v.is_number_float() && std::trunc(v.get<double>()) == v.get<double>() &&
        std::fabs(v.get<double>()) < 9.0e15)
        return static_cast<int64_t>(v.get<double>());
    DF_FAIL("config key '{}' is {} (expected an integer)", key, v.dump());
}

inline int64_t req_int(const json& j, const char* key, const char* what) {
    DF_CHECK(present(j, key), "config.json has no '{}' (required for {})", key, what);
    return as_int(j[key], key);
}

inline int64_t opt_int(const json& j, const char* key, int64_t fallback) {
    return present(j, key) ? as_int(j[key], key) : fallback;
}

inline double opt_double(const json& j, const char* key, double fallback) {
    if (!present(j, key)) return fallback;
    DF_CHECK(j[key].is_number(), "config key '{}' is {} (expected a number)", key, j[key].dump());
    return j[key].get<double>();
}

inline double req_double(const json& j, const char* key, const char* what) {
    DF_CHECK(present(j, key), "config.json has no '{}' (required for {})", key, what);
    return opt_double(j, key, 0.0);
}

inline bool opt_bool(const json& j, const char* key, bool fallback) {
    if (!present(j, key)) return fallback;
    DF_CHECK(j[key].is_boolean(), "config key '{}' is {} (expected true or false)", key,
             j[key].dump());
    return j[key].get<bool>();
}

// A list of integers (absent or null: empty).
inline std::vector<int64_t> int_list(const json& j, const char* key) {
    if (!present(j, key)) return {};
    DF_CHECK(j[key].is_array(), "config key '{}' is {} (expected a list of integers)", key,
             j[key].dump());
    std::vector<int64_t> out;
    for (const auto& v : j[key]) out.push_back(as_int(v, key));
    return out;
}

// config.json's layer_types as written (a non-string entry as its JSON text, so the check that
// names the entry can quote it); `kinds` names the expected entries for the error.
inline std::vector<std::string> layer_type_list(const json& j, const char* kinds) {
    std::vector<std::string> out;
    if (!present(j, "layer_types")) return out;
    DF_CHECK(j["layer_types"].is_array(), "config key 'layer_types' is {} (expected a list of {})",
             j["layer_types"].dump(), kinds);
    DF_CHECK(j["layer_types"].size() <= static_cast<size_t>(kMaxLayers),
             "config key 'layer_types' lists {} layers, more than {}", j["layer_types"].size(),
             kMaxLayers);
    for (const auto& t : j["layer_types"])
        out.push_back(t.is_string() ? t.get<std::string>() : t.dump());
    return out;
}

// The MoE and gpt-oss keys of a target's config.json into c (c's layer fields already read).
void parse_moe_fields(const json& j, TargetConfig& c);
// Their problems, each a full sentence, appended to p.
void moe_problems(const TargetConfig& c, std::vector<std::string>& p);
// Their keys, as transformers writes them for c.model_type, added to j.
void moe_fields_json(const TargetConfig& c, json& j);

// The hybrid linear-attention families (hf_config_hybrid.cpp). config.json's model_type names
// one: qwen3_next, qwen3_5_text, qwen3_5_moe_text, or the multimodal wrappers qwen3_5 /
// qwen3_5_moe (their text model in text_config).
bool is_hybrid_model_type(const std::string& model_type);
struct HybridSource {
    const json* text;        // the object holding the text model's keys
    std::string model_type;  // qwen3_next, qwen3_5 or qwen3_5_moe
    bool wrapper;            // text is the wrapper's text_config
};
HybridSource hybrid_source(const json& j);
// The hybrid keys of the text config j (the wrapper's top level `top`, else j itself) into c.
void parse_hybrid_fields(const json& j, const json& top, bool wrapper, TargetConfig& c);
void hybrid_problems(const TargetConfig& c, std::vector<std::string>& p);
// The text model's config as transformers' ...ForCausalLM writes it.
void hybrid_fields_json(const TargetConfig& c, json& j);

// DSpark drafters (hf_config_dspark.cpp): whether j describes one (Qwen3DSparkModel,
// DSparkDraftModel, projector_type "dspark" or a speculators "dspark" config); its keys into d
// (top level first, then dflash_config); their problems.
bool is_dspark_config_json(const json& j);
void parse_dspark_fields(const json& j, const json& dc, DrafterConfig& d);
std::vector<std::string> dspark_problems(const DrafterConfig& d);

}  // namespace dflash::config_fields

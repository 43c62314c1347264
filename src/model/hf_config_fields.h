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

}  // namespace dflash::config_fields

// The pipeline around BPE in tokenizer.json and the specials of tokenizer_config.json
// (hf_tokenizer_json.h). Tested by tests/tokenizer/hf_tokenizer_test.cpp.
#include "tokenizer/hf_tokenizer_json.h"

#include "core/error.h"
#include "core/json_int.h"
#include "tokenizer/regex_split.h"

namespace dflash::hf {

namespace {

using nlohmann::json;

std::string type_of(const json& j) {
    return j.is_object() && j.contains("type") && j["type"].is_string()
               ? j["type"].get<std::string>()
               : std::string();
}

// A literal string as a regular expression.
std::string escape_literal(const std::string& s) {
    std::string out;
    for (char c : s) {
        if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) out += '\\';
        out += c;
    }
    return out;
}

std::string split_pattern(const json& split) {
    DF_CHECK(split.value("behavior", std::string()) == "Isolated" && !split.value("invert", false),
             "tokenizer.json Split pre-tokenizer {} has behavior {} / invert {}; only Isolated "
             "splits without invert are supported",
             split.dump().substr(0, 200), split.value("behavior", std::string("?")),
             split.value("invert", false));
    const json& p = split.value("pattern", json());
    if (p.is_object() && p.contains("Regex") && p["Regex"].is_string())
        return p["Regex"].get<std::string>();
    if (p.is_object() && p.contains("String") && p["String"].is_string())
        return escape_literal(p["String"].get<std::string>());
    DF_FAIL("tokenizer.json Split pattern {} is neither {{\"Regex\": ...}} nor {{\"String\": ...}}",
            p.dump());
}

// The ByteLevel pre-tokenizer step; returns whether it splits with GPT-2's pattern.
bool byte_level_step(const json& b) {
    DF_CHECK(!b.value("add_prefix_space", false),
             "tokenizer.json ByteLevel pre-tokenizer has add_prefix_space true, which dflash does "
             "not support");
    return b.value("use_regex", true);  // HF's default is true
}

// A token string of tokenizer_config.json: "text" or {"content": "text", ...}.
std::string token_string(const json& j, const char* key) {
    if (!j.contains(key) || j[key].is_null()) return "";
    const json& v = j[key];
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object() && v.contains("content") && v["content"].is_string())
        return v["content"].get<std::string>();
    DF_FAIL("tokenizer_config.json \"{}\" is {}; expected a string or {{\"content\": ...}}", key,
            v.dump());
}

}  // namespace

bool read_normalizer(const json& j) {
    if (j.is_null()) return false;
    const std::string t = type_of(j);
    if (t == "NFC") return true;
    if (t == "Sequence" && j.contains("normalizers") && j["normalizers"].is_array()) {
        bool nfc = false;
        for (const auto& n : j["normalizers"]) nfc = read_normalizer(n) || nfc;
        return nfc;
    }
    DF_FAIL("tokenizer.json normalizer {} is not supported (supported: none, NFC)",
            j.dump().substr(0, 200));
}

std::vector<std::string> read_pre_tokenizer(const json& j) {
    const std::string t = type_of(j);
    std::vector<std::string> patterns;
    if (t == "ByteLevel") {
        if (byte_level_step(j)) patterns.emplace_back(kGpt2SplitPattern);
        return patterns;
    }
    DF_CHECK(t == "Sequence" && j.contains("pretokenizers") && j["pretokenizers"].is_array() &&
                 !j["pretokenizers"].empty(),
             "tokenizer.json pre_tokenizer {} is not supported; byte-level BPE needs ByteLevel, "
             "or a Sequence of Split steps ending in ByteLevel",
             j.dump().substr(0, 200));
    const json& steps = j["pretokenizers"];
    for (size_t i = 0; i + 1 < steps.size(); ++i) {
        DF_CHECK(type_of(steps[i]) == "Split",
                 "tokenizer.json pre-tokenizer step {} is {}; only Split steps may precede the "
                 "final ByteLevel",
                 i, steps[i].dump().substr(0, 200));
        patterns.push_back(split_pattern(steps[i]));
    }
    DF_CHECK(type_of(steps.back()) == "ByteLevel",
             "tokenizer.json pre-tokenizer's last step is {}; byte-level BPE ends with ByteLevel",
             steps.back().dump().substr(0, 200));
    if (byte_level_step(steps.back())) patterns.emplace_back(kGpt2SplitPattern);
    return patterns;
}

AddedAround read_post_processor(const json& j) {
    AddedAround out;
    const std::string t = type_of(j);
    if (j.is_null() || t == "ByteLevel") return out;
    if (t == "Sequence" && j.contains("processors") && j["processors"].is_array()) {
        for (const auto& p : j["processors"]) {
            const AddedAround a = read_post_processor(p);
            out.before.insert(out.before.end(), a.before.begin(), a.before.end());
            out.after.insert(out.after.end(), a.after.begin(), a.after.end());
        }
        return out;
    }
    DF_CHECK(t == "TemplateProcessing" && j.contains("single") && j["single"].is_array(),
             "tokenizer.json post_processor {} is not supported (supported: ByteLevel, "
             "TemplateProcessing, a Sequence of those)",
             j.dump().substr(0, 200));
    const json specials = j.value("special_tokens", json::object());
    bool seen_sequence = false;
    for (const auto& item : j["single"]) {
        if (item.contains("Sequence")) {
            seen_sequence = true;
            continue;
        }
        DF_CHECK(item.contains("SpecialToken") && item["SpecialToken"].contains("id"),
                 "tokenizer.json TemplateProcessing item {} is neither a Sequence nor a "
                 "SpecialToken",
                 item.dump());
        const std::string name = item["SpecialToken"]["id"].get<std::string>();
        DF_CHECK(specials.contains(name) && specials[name].contains("ids"),
                 "tokenizer.json TemplateProcessing names special token \"{}\" but does not "
                 "define its ids",
                 name);
        auto& dst = seen_sequence ? out.after : out.before;
        DF_CHECK(specials[name]["ids"].is_array(),
                 "tokenizer.json TemplateProcessing special token \"{}\" has ids {}; expected a "
                 "list of token ids",
                 name, specials[name]["ids"].dump());
        for (const auto& id : specials[name]["ids"])
            dst.push_back(json_integer<int32_t>(
                id,
                fmt::format("tokenizer.json TemplateProcessing special token \"{}\" id", name)));
    }
    return out;
}

void check_decoder(const json& j) {
    const std::string t = type_of(j);
    if (t == "ByteLevel") return;
    if (t == "Sequence" && j.contains("decoders") && j["decoders"].is_array() &&
        j["decoders"].size() == 1) {
        check_decoder(j["decoders"][0]);
        return;
    }
    DF_FAIL("tokenizer.json decoder {} is not supported; byte-level BPE decodes with ByteLevel",
            j.is_null() ? std::string("null") : j.dump().substr(0, 200));
}

TokenizerConfig read_tokenizer_config(const json& j) {
    TokenizerConfig c;
    if (j.is_null()) return c;
    DF_CHECK(j.is_object(), "tokenizer_config.json is a JSON {}; expected an object",
             j.type_name());
    c.bos_token = token_string(j, "bos_token");
    c.eos_token = token_string(j, "eos_token");
    c.pad_token = token_string(j, "pad_token");
    if (j.contains("chat_template") && !j["chat_template"].is_null()) {
        const json& t = j["chat_template"];
        if (t.is_string()) {
            c.chat_template = t.get<std::string>();
        } else if (t.is_array()) {
            // Several named templates: [{"name": "default", "template": "..."}, ...].
            bool found = false;
            for (const auto& e : t) {
                if (!e.is_object() || !e.contains("name") || e["name"] != "default") continue;
                found = true;
                if (e.contains("template") && e["template"].is_string()) {
                    c.chat_template = e["template"].get<std::string>();
                } else {
                    c.chat_template_problem = fmt::format(
                        "tokenizer_config.json's chat_template entry \"default\" has template {}, "
                        "not a string",
                        e.contains("template") ? e["template"].dump().substr(0, 80) : "absent");
                }
            }
            if (!found)
                c.chat_template_problem =
                    "tokenizer_config.json's chat_template is a list without an entry named "
                    "\"default\"";
        } else {
            c.chat_template_problem = fmt::format(
                "tokenizer_config.json's chat_template is a JSON {} ({}), not a string (nor a list "
                "of {{\"name\", \"template\"}} entries)",
                t.type_name(), t.dump().substr(0, 80));
        }
    }
    return c;
}

}  // namespace dflash::hf

// DSpark drafter configs (docs/formats.md "DSpark drafter directory"): the DeepSpec/SGLang layout
// (architectures Qwen3DSparkModel, the DSpark keys top-level and again in dflash_config, as
// SGLang's normalised exports carry them) and the speculators (vLLM) layout (speculators_model_type
// "dspark", the layer config nested in transformer_layer_config). Tested by
// tests/model/dspark_test.cpp.
#include <fmt/format.h>

#include "core/atomic_file.h"
#include "model/hf_config.h"
#include "model/hf_config_fields.h"

namespace dflash {

using namespace config_fields;

const char* markov_head_type_name(MarkovHeadType t) {
    switch (t) {
        case MarkovHeadType::vanilla:
            return "vanilla";
        case MarkovHeadType::gated:
            return "gated";
        case MarkovHeadType::rnn:
            return "rnn";
    }
    return "?";
}

MarkovHeadType parse_markov_head_type(const std::string& name, const std::string& what) {
    for (MarkovHeadType t : {MarkovHeadType::vanilla, MarkovHeadType::gated, MarkovHeadType::rnn})
        if (name == markov_head_type_name(t)) return t;
    DF_FAIL("{}='{}' is not a Markov head type; expected vanilla, gated or rnn", what, name);
}

const char* drafter_dialect_name(DrafterDialect d) {
    switch (d) {
        case DrafterDialect::zlab:
            return "zlab";
        case DrafterDialect::deepspec:
            return "deepspec";
        case DrafterDialect::speculators:
            return "speculators";
    }
    return "?";
}

DrafterDialect parse_drafter_dialect(const std::string& name) {
    for (DrafterDialect d :
         {DrafterDialect::zlab, DrafterDialect::deepspec, DrafterDialect::speculators})
        if (name == drafter_dialect_name(d)) return d;
    DF_FAIL(
        "'{}' is not a drafter dialect; expected deepspec (DeepSpec/SGLang: Qwen3DSparkModel) or "
        "speculators (vLLM: speculators_model_type dspark), or zlab for DFlash drafters",
        name);
}

namespace {

bool names_arch(const json& j, const char* arch) {
    if (!j.contains("architectures") || !j["architectures"].is_array()) return false;
    for (const auto& a : j["architectures"])
        if (a == arch) return true;
    return false;
}

// A DSpark key: top level first (DeepSpec), then dflash_config (SpecForge), then the default.
const json* dspark_key(const json& j, const json& dc, const char* key) {
    if (present(j, key)) return &j[key];
    if (present(dc, key)) return &dc[key];
    return nullptr;
}

}  // namespace

bool config_fields::is_dspark_config_json(const json& j) {
    if (!j.is_object()) return false;
    if (names_arch(j, "Qwen3DSparkModel") || names_arch(j, "DSparkDraftModel")) return true;
    if (present(j, "speculators_model_type") && j["speculators_model_type"] == "dspark")
        return true;
    const json* dc = j.contains("dflash_config") ? &j["dflash_config"] : nullptr;
    return dc != nullptr && dc->is_object() && present(*dc, "projector_type") &&
           (*dc)["projector_type"] == "dspark";
}

void config_fields::parse_dspark_fields(const json& j, const json& dc, DrafterConfig& d) {
    DsparkConfig& c = d.ds;
    if (const json* v = dspark_key(j, dc, "markov_rank")) c.markov_rank = as_int(*v, "markov_rank");
    if (const json* v = dspark_key(j, dc, "markov_head_type")) {
        DF_CHECK(v->is_string(), "config key 'markov_head_type' is {} (expected a string)",
                 v->dump());
        c.markov_head = parse_markov_head_type(v->get<std::string>(), "markov_head_type");
    }
    auto flag = [&](const char* key, bool fallback) {
        const json* v = dspark_key(j, dc, key);
        if (v == nullptr) return fallback;
        DF_CHECK(v->is_boolean(), "config key '{}' is {} (expected true or false)", key, v->dump());
        return v->get<bool>();
    };
    c.confidence_head = flag("enable_confidence_head", true);
    c.confidence_with_markov = flag("confidence_head_with_markov", true);
    if (const json* v = dspark_key(j, dc, "num_anchors")) c.num_anchors = as_int(*v, "num_anchors");
}

std::vector<std::string> config_fields::dspark_problems(const DrafterConfig& d) {
    std::vector<std::string> p;
    const DsparkConfig& c = d.ds;
    if (c.markov_rank < 1 || c.markov_rank > kMaxSelectorRank)
        p.push_back(fmt::format("markov_rank={} is outside [1, {}] (the DSpark paper uses 256)",
                                c.markov_rank, kMaxSelectorRank));
    return p;
}

void DrafterConfig::dspark_json(json& j) const {
    // DeepSpec's top-level keys, the same again in dflash_config (SpecForge's layout, which
    // SGLang's export normaliser copies to the top level).
    j["architectures"] = {"Qwen3DSparkModel"};
    j.erase("auto_map");
    json& dc = j["dflash_config"];
    dc["projector_type"] = "dspark";
    dc["attention_mode"] = "gqa";
    j["mask_token_id"] = mask_token_id;
    j["target_layer_ids"] = target_layer_ids;
    j["num_anchors"] = ds.num_anchors;  // DeepSpec's model asserts that it is there
    for (json* o : {&j, &dc}) {
        (*o)["markov_rank"] = ds.markov_rank;
        (*o)["markov_head_type"] = markov_head_type_name(ds.markov_head);
        (*o)["enable_confidence_head"] = ds.confidence_head;
        (*o)["confidence_head_with_markov"] = ds.confidence_with_markov;
    }
    j["tie_word_embeddings"] = false;
}

// speculators' DSpark config (docs/formats.md "DSpark drafter directory"): the draft layers'
// Qwen3 config nested, aux_hidden_state_layer_ids one more than the z-lab ids (vLLM subtracts 1),
// sample_from_anchor true (the anchor slot predicts).
json DrafterConfig::to_speculators_json() const {
    DF_CHECK(dspark(), "the speculators dialect is written for DSpark drafters only");
    json layer_cfg = to_json();
    for (const char* k :
         {"architectures", "auto_map", "dflash_config", "block_size", "mask_token_id",
          "target_layer_ids", "num_target_layers", "markov_rank", "markov_head_type",
          "enable_confidence_head", "confidence_head_with_markov"})
        layer_cfg.erase(k);
    layer_cfg["model_type"] = "qwen3";
    std::vector<int64_t> aux;
    for (int64_t id : target_layer_ids) aux.push_back(id + 1);
    json j;
    j["speculators_model_type"] = "dspark";
    j["architectures"] = {"DSparkSpeculator"};
    j["transformer_layer_config"] = layer_cfg;
    j["draft_vocab_size"] = layer.vocab_size;
    j["block_size"] = block_size;
    j["target_hidden_size"] = layer.hidden_size;
    j["mask_token_id"] = mask_token_id;
    j["aux_hidden_state_layer_ids"] = aux;
    j["num_target_layers"] = num_target_layers;
    j["sample_from_anchor"] = true;
    j["sliding_window_non_causal"] = false;
    j["markov_rank"] = ds.markov_rank;
    j["markov_head_type"] = markov_head_type_name(ds.markov_head);
    j["enable_confidence_head"] = ds.confidence_head;
    j["confidence_head_with_markov"] = ds.confidence_with_markov;
    j["speculators_config"] = {
        {"algorithm", "dspark"},
        {"proposal_methods", {{{"proposal_type", "greedy"}, {"speculative_tokens", block_size}}}},
        {"default_proposal_method", "greedy"},
        {"verifier", {{"architectures", json::array()}, {"name_or_path", nullptr}}}};
    return j;
}

DrafterConfig DrafterConfig::from_speculators_json(const json& j) {
    DF_CHECK(j.is_object() && present(j, "speculators_model_type") &&
                 j["speculators_model_type"] == "dspark",
             "not a speculators DSpark config (speculators_model_type is not \"dspark\")");
    DF_CHECK(present(j, "transformer_layer_config") && j["transformer_layer_config"].is_object(),
             "speculators DSpark config has no transformer_layer_config object");
    DF_CHECK(opt_bool(j, "sample_from_anchor", false),
             "speculators DSpark config has sample_from_anchor false (the DFlash slot layout: "
             "the anchor slot does not predict); dflash runs the DSpark layout only");
    // The z-lab layout rebuilt from the pieces, then read as any DSpark config.
    json z = j["transformer_layer_config"];
    z["architectures"] = {"Qwen3DSparkModel"};
    z["block_size"] = req_int(j, "block_size", "a DSpark drafter");
    z["num_target_layers"] = req_int(j, "num_target_layers", "a DSpark drafter");
    std::vector<int64_t> ids;
    for (int64_t id : int_list(j, "aux_hidden_state_layer_ids")) ids.push_back(id - 1);
    json dc = {{"mask_token_id", req_int(j, "mask_token_id", "a DSpark drafter")},
               {"target_layer_ids", ids}};
    for (const char* k : {"markov_rank", "markov_head_type", "enable_confidence_head",
                          "confidence_head_with_markov"})
        if (present(j, k)) dc[k] = j[k];
    z["dflash_config"] = dc;
    DrafterConfig d = from_json(z);
    DF_CHECK(!present(j, "draft_vocab_size") ||
                 as_int(j["draft_vocab_size"], "draft_vocab_size") == d.layer.vocab_size,
             "speculators DSpark config has draft_vocab_size {} but vocab_size {}: pruned draft "
             "vocabularies (d2t/t2d) are not supported",
             j["draft_vocab_size"].dump(), d.layer.vocab_size);
    return d;
}

DrafterDialect drafter_config_dialect(const json& j) {
    if (present(j, "speculators_model_type")) return DrafterDialect::speculators;
    if (is_dspark_config_json(j)) return DrafterDialect::deepspec;
    return DrafterDialect::zlab;
}

void DrafterConfig::save(const std::filesystem::path& dir, DrafterDialect dialect) const {
    DF_CHECK(dialect == DrafterDialect::zlab || dspark(),
             "the {} dialect is for DSpark drafters; this drafter is written in the zlab layout",
             drafter_dialect_name(dialect));
    DF_CHECK(dialect != DrafterDialect::zlab || !dspark(),
             "a DSpark drafter is written in the deepspec or speculators dialect, not zlab");
    if (dialect != DrafterDialect::speculators) return save(dir);
    const auto p = problems();
    DF_CHECK(p.empty(), "refusing to save an invalid drafter config: {}", p.front());
    std::filesystem::create_directories(dir);
    write_text_atomic(dir / "config.json", to_speculators_json().dump(2) + "\n");
}

}  // namespace dflash

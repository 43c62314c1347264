// HF config.json parsing, writing and validation for targets (Qwen3, Llama) and DFlash drafters.
#include "model/hf_config.h"

#include <fstream>

#include "config/registry.h"
#include "core/checkpoint_io.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using nlohmann::json;
using test::error_of;
namespace fs = std::filesystem;

// Qwen3-8B's config.json as published.
json qwen3_8b_json() {
    return json::parse(R"({
      "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
      "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 12288,
      "max_position_embeddings": 40960, "max_window_layers": 36, "model_type": "qwen3",
      "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
      "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
      "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
      "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// Llama-3.1-8B-Instruct's config.json as published (no head_dim; eos is a list).
json llama31_json() {
    return json::parse(R"({
      "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
      "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "hidden_act": "silu",
      "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 14336,
      "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
      "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
      "pretraining_tp": 1, "rms_norm_eps": 1e-05,
      "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                       "original_max_position_embeddings": 8192, "rope_type": "llama3"},
      "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
      "use_cache": true, "vocab_size": 128256})");
}

// z-lab/Qwen3-8B-DFlash-b16 config.json (docs/formats.md "DFlash drafter directory").
json qwen3_8b_drafter_json() {
    return json::parse(R"({
      "architectures": ["DFlashDraftModel"], "auto_map": {"AutoModel": "dflash.DFlashDraftModel"},
      "model_type": "qwen3", "block_size": 16,
      "dflash_config": {"mask_token_id": 151669, "target_layer_ids": [1, 9, 17, 25, 33]},
      "num_target_layers": 36, "num_hidden_layers": 5, "hidden_size": 4096,
      "intermediate_size": 12288, "num_attention_heads": 32, "num_key_value_heads": 8,
      "head_dim": 128, "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1000000,
      "rope_scaling": null, "max_position_embeddings": 40960,
      "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention",
                      "full_attention"],
      "attention_bias": false, "tie_word_embeddings": false, "vocab_size": 151936,
      "dtype": "bfloat16", "sliding_window": null, "use_sliding_window": false})");
}

#define EXPECT_ERROR_HAS(stmt, needle)                                            \
    do {                                                                          \
        const std::string msg_ = error_of([&] { stmt; });                         \
        EXPECT_NE(msg_.find(needle), std::string::npos) << "error was: " << msg_; \
    } while (0)

TEST(TargetConfig, ParsesQwen3) {
    const auto c = TargetConfig::from_json(qwen3_8b_json());
    EXPECT_EQ(c.model_type, "qwen3");
    EXPECT_TRUE(c.qk_norm);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.intermediate_size, 12288);
    EXPECT_EQ(c.num_hidden_layers, 36);
    EXPECT_EQ(c.num_attention_heads, 32);
    EXPECT_EQ(c.num_key_value_heads, 8);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.vocab_size, 151936);
    EXPECT_EQ(c.max_position_embeddings, 40960);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
    EXPECT_EQ(c.rope.scaling.type, RopeScalingType::none);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_EQ(c.bos_token_id, 151643);
    EXPECT_EQ(c.eos_token_id, 151645);
}

TEST(TargetConfig, ParsesLlamaWithLlama3RopeAndDefaults) {
    const auto c = TargetConfig::from_json(llama31_json());
    EXPECT_EQ(c.model_type, "llama");
    EXPECT_FALSE(c.qk_norm);
    EXPECT_EQ(c.head_dim, 128);  // absent: hidden / heads
    EXPECT_EQ(c.eos_token_id, 128001);
    EXPECT_EQ(c.rope.scaling.type, RopeScalingType::llama3);
    EXPECT_DOUBLE_EQ(c.rope.scaling.factor, 8.0);
    EXPECT_DOUBLE_EQ(c.rope.scaling.low_freq_factor, 1.0);
    EXPECT_DOUBLE_EQ(c.rope.scaling.high_freq_factor, 4.0);
    EXPECT_EQ(c.rope.scaling.original_max_position, 8192);
    EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);

    // Older configs spell the key "type"; transformers 5 nests everything in rope_parameters.
    json j = llama31_json();
    j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    auto lin = TargetConfig::from_json(j);
    EXPECT_EQ(lin.rope.scaling.type, RopeScalingType::linear);
    EXPECT_DOUBLE_EQ(lin.rope.scaling.factor, 2.0);
    j.erase("rope_scaling");
    j.erase("rope_theta");
    j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 250000.0}};
    auto v5 = TargetConfig::from_json(j);
    EXPECT_EQ(v5.rope.scaling.type, RopeScalingType::none);
    EXPECT_DOUBLE_EQ(v5.rope.theta, 250000.0);
    j.erase("rope_parameters");
    j["rope_scaling"] = {{"rope_type", "default"}};
    EXPECT_EQ(TargetConfig::from_json(j).rope.scaling.type, RopeScalingType::none);
    EXPECT_DOUBLE_EQ(TargetConfig::from_json(j).rope.theta, 10000.0);  // HF default
}

TEST(TargetConfig, UnsupportedRopeAndModelsAreClearErrors) {
    for (const char* type : {"dynamic", "longrope"}) {  // yarn: tests/model/moe_config_test.cpp
        json j = llama31_json();
        j["rope_scaling"] = {{"rope_type", type}, {"factor", 4.0}};
        EXPECT_ERROR_HAS(TargetConfig::from_json(j), fmt::format("'{}' is unsupported", type));
    }
    json j = qwen3_8b_json();
    j["model_type"] = "mistral";
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "model_type 'mistral' is not supported");
    j = qwen3_8b_json();
    j["hidden_act"] = "gelu";
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "only \"silu\"");
    j = qwen3_8b_json();
    j.erase("hidden_size");
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "no 'hidden_size'");
    j = qwen3_8b_json();
    j["num_hidden_layers"] = "36";
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "'num_hidden_layers' is \"36\"");
}

TEST(TargetConfig, ValidationListsEveryProblem) {
    json j = qwen3_8b_json();
    j["num_key_value_heads"] = 5;
    j["rms_norm_eps"] = 0;
    const std::string msg = error_of([&] { TargetConfig::from_json(j); });
    EXPECT_NE(msg.find("num_attention_heads=32 is not a multiple of num_key_value_heads=5"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("rms_norm_eps=0 must be positive"), std::string::npos) << msg;
}

TEST(TargetConfig, ToJsonIsWhatTransformersLoadsAndRoundTrips) {
    const auto q = TargetConfig::from_json(qwen3_8b_json());
    const json jq = q.to_json();
    // Every key of the published Qwen3-8B config is written, with the same value.
    const json published = qwen3_8b_json();
    for (const auto& [k, v] : published.items()) {
        if (k == "transformers_version") continue;
        ASSERT_TRUE(jq.contains(k)) << k;
        EXPECT_EQ(jq[k], v) << k;
    }
    const auto q2 = TargetConfig::from_json(jq);
    EXPECT_EQ(q2.to_json(), jq);

    const auto l = TargetConfig::from_json(llama31_json());
    const json jl = l.to_json();
    EXPECT_EQ(jl["architectures"], json({"LlamaForCausalLM"}));
    EXPECT_EQ(jl["mlp_bias"], false);
    EXPECT_EQ(jl["hidden_act"], "silu");
    EXPECT_EQ(jl["attention_dropout"], 0.0);
    EXPECT_EQ(jl["eos_token_id"], json({128001, 128008, 128009}));  // the whole list
    EXPECT_EQ(jl["rope_scaling"]["rope_type"], "llama3");
    EXPECT_EQ(jl["rope_scaling"]["original_max_position_embeddings"], 8192);
    EXPECT_FALSE(jl.contains("use_sliding_window"));
    const auto l2 = TargetConfig::from_json(jl);
    EXPECT_EQ(l2.to_json(), jl);
    EXPECT_EQ(l2.rope.scaling.factor, 8.0);
}

TEST(TargetConfig, SaveLoadIsAtomicAndNamesTheFile) {
    test::TempDir dir;
    const auto c = TargetConfig::from_json(qwen3_8b_json());
    c.save(dir.path());
    EXPECT_FALSE(fs::exists(dir / "config.json.tmp"));
    EXPECT_EQ(TargetConfig::load(dir.path()).to_json(), c.to_json());
    test::TempDir empty;
    EXPECT_ERROR_HAS(TargetConfig::load(empty.path()), "no config.json in");
    json bad = qwen3_8b_json();
    bad["num_key_value_heads"] = 7;
    std::ofstream(dir / "config.json") << bad.dump();
    EXPECT_ERROR_HAS(TargetConfig::load(dir.path()), (dir / "config.json").string() + ": invalid");
    std::ofstream(dir / "config.json") << "{ not json";
    EXPECT_ERROR_HAS(TargetConfig::load(dir.path()), "is not valid JSON");
}

TEST(DefaultTargetLayerIds, FollowsTheReferenceRule) {
    using V = std::vector<int64_t>;
    EXPECT_EQ(default_target_layer_ids(36, 5), (V{1, 9, 17, 25, 33}));  // Qwen3-4B/8B
    EXPECT_EQ(default_target_layer_ids(32, 5), (V{1, 8, 15, 22, 29}));  // Llama-3.1-8B
    EXPECT_EQ(default_target_layer_ids(40, 5), (V{1, 10, 19, 28, 37}));
    EXPECT_EQ(default_target_layer_ids(64, 5), (V{1, 16, 31, 46, 61}));
    EXPECT_EQ(default_target_layer_ids(24, 5), (V{1, 6, 11, 16, 21}));
    EXPECT_EQ(default_target_layer_ids(28, 5), (V{1, 7, 13, 19, 25}));
    EXPECT_EQ(default_target_layer_ids(36, 1), (V{18}));
    // 1 + 1.5 = 2.5 rounds half to even (Python round), giving 2, not 3.
    EXPECT_EQ(default_target_layer_ids(7, 3), (V{1, 2, 4}));
    EXPECT_EQ(default_target_layer_ids(12, 4), (V{1, 4, 6, 9}));  // 3.67 -> 4, 6.33 -> 6
    EXPECT_ERROR_HAS(default_target_layer_ids(2, 3), "too shallow");
}

TEST(DefaultTargetLayerIds, NeverTheLastLayer) {
    using V = std::vector<int64_t>;
    for (int64_t L = 2; L <= 80; ++L) {
        for (int64_t n = 1; n <= std::min<int64_t>(5, std::max<int64_t>(1, L - 3)); ++n) {
            const V ids = default_target_layer_ids(L, n);
            ASSERT_EQ(static_cast<int64_t>(ids.size()), n);
            for (int64_t id : ids) EXPECT_TRUE(id >= 0 && id < L - 1) << "L=" << L << " n=" << n;
        }
    }
    EXPECT_EQ(default_target_layer_ids(2, 1), V{0});  // [L/2] would be the last layer
    EXPECT_EQ(default_target_layer_ids(3, 1), V{1});
    EXPECT_EQ(default_target_layer_ids(4, 1), V{2});
    EXPECT_ERROR_HAS(default_target_layer_ids(1, 1), "at least 2");
    EXPECT_EQ(default_target_layer_ids(4, 2), (V{1, 1}));  // as the reference rule gives
    EXPECT_ERROR_HAS(default_target_layer_ids(2, 2), "below the last");
}

TEST(DrafterConfig, RefusesTheLastTargetLayer) {
    json j = qwen3_8b_drafter_json();
    j["dflash_config"]["target_layer_ids"] = {1, 9, 17, 25, 35};
    const std::string msg = error_of([&] { DrafterConfig::from_json(j); });
    EXPECT_NE(msg.find("target_layer_ids[4]=35 is the target's last layer"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("SGLang"), std::string::npos) << msg;
    EXPECT_NE(msg.find("pick ids in 0..34, e.g. the default [1, 9, 17, 25, 33]"), std::string::npos)
        << msg;
    // The pairing the issue measured: ids [1, 2, 3] of a 4-layer target.
    auto t = TargetConfig::from_json(qwen3_8b_json());
    t.num_hidden_layers = 4;
    EXPECT_ERROR_HAS(make_drafter_config(t, 1, 8, 5, {1, 2, 3}), "target_layer_ids[2]=3 is the");
    EXPECT_EQ(make_drafter_config(t, 1, 8, 5, {1, 2}).target_layer_ids,
              (std::vector<int64_t>{1, 2}));
}

TEST(TargetConfig, StopTokensFromEveryEosList) {
    const auto l = TargetConfig::from_json(llama31_json());
    EXPECT_EQ(l.eos_token_id, 128001);
    EXPECT_EQ(l.extra_eos_token_ids, (std::vector<int64_t>{128008, 128009}));
    EXPECT_EQ(l.stop_token_ids(), (std::vector<int64_t>{128001, 128008, 128009}));

    test::TempDir dir;
    TargetConfig::from_json(qwen3_8b_json()).save(dir.path());
    std::ofstream(dir / "generation_config.json")
        << R"({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "do_sample": true})";
    const auto q = TargetConfig::load(dir.path());
    EXPECT_EQ(q.generation_eos_token_ids, (std::vector<int64_t>{151645, 151643}));
    EXPECT_EQ(q.stop_token_ids(), (std::vector<int64_t>{151645, 151643}));
    EXPECT_FALSE(q.to_json().contains("generation_eos_token_ids"));
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": 7})";
    EXPECT_EQ(TargetConfig::load(dir.path()).stop_token_ids(), (std::vector<int64_t>{151645, 7}));
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [151645, 999999]})";
    EXPECT_ERROR_HAS(TargetConfig::load(dir.path()), "generation_config.json");
    std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": "x"})";
    EXPECT_ERROR_HAS(TargetConfig::load(dir.path()), "expected an integer");
}

TEST(DrafterConfig, ParsesTheReleasedQwen3_8bDrafter) {
    const auto d = DrafterConfig::from_json(qwen3_8b_drafter_json());
    EXPECT_EQ(d.block_size, 16);
    EXPECT_EQ(d.mask_token_id, 151669);
    EXPECT_EQ(d.num_target_layers, 36);
    EXPECT_EQ(d.target_layer_ids, (std::vector<int64_t>{1, 9, 17, 25, 33}));
    EXPECT_EQ(d.num_features(), 5);
    EXPECT_EQ(d.layer.num_hidden_layers, 5);
    EXPECT_EQ(d.layer.hidden_size, 4096);
    EXPECT_EQ(d.layer.head_dim, 128);
    EXPECT_TRUE(d.layer.qk_norm);
    EXPECT_EQ(d.layer.torch_dtype, "bfloat16");
    // Written back, it is the same document.
    EXPECT_EQ(d.to_json(), qwen3_8b_drafter_json());
    EXPECT_TRUE(is_drafter_config_json(qwen3_8b_drafter_json()));
    EXPECT_FALSE(is_drafter_config_json(qwen3_8b_json()));
}

TEST(DrafterConfig, AcceptsSglangAndHistoricVariants) {
    json j = qwen3_8b_drafter_json();
    j.erase("block_size");
    j.erase("num_target_layers");
    j["dflash_config"]["block_size"] = 8;
    j["dflash_config"]["num_target_layers"] = 32;
    j["dflash_config"]["target_layer_ids"] = {1, 8, 15, 22, 29};
    auto d = DrafterConfig::from_json(j);
    EXPECT_EQ(d.block_size, 8);
    EXPECT_EQ(d.num_target_layers, 32);
    // No target_layer_ids: one feature per draft layer by the default rule.
    j = qwen3_8b_drafter_json();
    j["dflash_config"].erase("target_layer_ids");
    j["num_hidden_layers"] = 3;
    j.erase("layer_types");
    d = DrafterConfig::from_json(j);
    EXPECT_EQ(d.target_layer_ids, (std::vector<int64_t>{1, 17, 33}));
}

// block_size (and num_target_layers) in both places once took the top-level value silently;
// engines differ in which one they read, so a disagreement is refused with both values and the
// file named. Agreeing values (what dflash writes for DFlash2 drafters) are fine.
TEST(DrafterConfig, DisagreeingBlockSizesAreRefused) {
    json j = qwen3_8b_drafter_json();
    j["dflash_config"]["block_size"] = 16;
    EXPECT_EQ(DrafterConfig::from_json(j).block_size, 16);
    j["dflash_config"]["block_size"] = 8;
    EXPECT_ERROR_HAS(DrafterConfig::from_json(j),
                     "block_size=16 at the top level but dflash_config.block_size=8");
    test::TempDir dir;
    std::ofstream(dir / "config.json") << j.dump();
    EXPECT_ERROR_HAS(DrafterConfig::load(dir.path()), (dir / "config.json").string() + ": ");
    EXPECT_ERROR_HAS(DrafterConfig::load(dir.path()), "dflash_config.block_size=8");
    j = qwen3_8b_drafter_json();
    j["dflash_config"]["num_target_layers"] = 32;
    EXPECT_ERROR_HAS(
        DrafterConfig::from_json(j),
        "num_target_layers=36 at the top level but dflash_config.num_target_layers=32");
}

// Parsing a config looks at the config alone: weights that do not fit it are the model loaders'
// to refuse (check_target_files / check_drafter_files), not TargetConfig::load's.
TEST(TargetConfig, LoadParsesTheConfigWithoutJudgingTheWeights) {
    test::TempDir dir;
    const auto c = TargetConfig::from_json(qwen3_8b_json());
    c.save(dir.path());
    std::ofstream(dir / "model.safetensors") << "not a safetensors file";
    EXPECT_EQ(TargetConfig::load(dir.path()).to_json(), c.to_json());
    const auto d = DrafterConfig::from_json(qwen3_8b_drafter_json());
    test::TempDir ddir;
    d.save(ddir.path());
    std::ofstream(ddir / "model.safetensors") << "not a safetensors file";
    EXPECT_EQ(DrafterConfig::load(ddir.path()).to_json(), d.to_json());
}

TEST(DrafterConfig, ValidationNamesValuesAndLimits) {
    json j = qwen3_8b_drafter_json();
    j["dflash_config"]["target_layer_ids"] = {1, 9, 17, 25, 36};
    j["dflash_config"]["mask_token_id"] = 151936;
    j["block_size"] = 1;
    const std::string msg = error_of([&] { DrafterConfig::from_json(j); });
    EXPECT_NE(msg.find("target_layer_ids[4]=36 but the target has 36 layers (ids 0..35)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("mask_token_id=151936 is outside the target vocabulary (0..151935)"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("block_size=1 is outside [2, 256]"), std::string::npos) << msg;
    j["block_size"] = 1000;
    EXPECT_ERROR_HAS(DrafterConfig::from_json(j), "block_size=1000 is outside [2, 256]");

    j = qwen3_8b_drafter_json();
    j["dflash_config"].erase("mask_token_id");
    EXPECT_ERROR_HAS(DrafterConfig::from_json(j), "no dflash_config.mask_token_id");
    j = qwen3_8b_drafter_json();
    j.erase("block_size");
    EXPECT_ERROR_HAS(DrafterConfig::from_json(j), "no 'block_size'");
    j = qwen3_8b_drafter_json();
    j["layer_types"][0] = "sliding_attention";
    EXPECT_ERROR_HAS(DrafterConfig::from_json(j), "layer_types[0] is \"sliding_attention\"");
    j = qwen3_8b_drafter_json();
    j["num_attention_heads"] = 30;
    EXPECT_ERROR_HAS(DrafterConfig::from_json(j), "not a multiple of num_key_value_heads=8");
}

TEST(ConfigLimits, AgreeWithTheSettingsRanges) {
    const config::Registry r = config::make_registry();
    EXPECT_EQ(r.find("drafter.block_size")->max, static_cast<double>(kMaxBlockSize));
    EXPECT_EQ(r.find("drafter.num_target_features")->max, static_cast<double>(kMaxTargetFeatures));
    EXPECT_EQ(r.find("drafter.target_layer_ids")->max, static_cast<double>(kMaxLayers - 1));
    EXPECT_LE(r.find("pretrain.num_layers")->max, static_cast<double>(kMaxLayers));
    EXPECT_LE(r.find("pretrain.hidden_size")->max, static_cast<double>(kMaxHiddenSize));
}

TEST(TargetConfig, DimensionsAboveTheirLimitsAreProblems) {
    for (const auto& [key, value] :
         std::vector<std::pair<std::string, int64_t>>{{"num_hidden_layers", 10000},
                                                      {"num_hidden_layers", 1000000000},
                                                      {"intermediate_size", int64_t{1} << 25},
                                                      {"vocab_size", int64_t{1} << 30}}) {
        json j = qwen3_8b_json();
        j[key] = value;
        EXPECT_ERROR_HAS(TargetConfig::from_json(j), fmt::format("{}={} is above", key, value));
    }
    json d = qwen3_8b_drafter_json();
    d["num_hidden_layers"] = 1000000000;
    d.erase("layer_types");
    d["dflash_config"].erase("target_layer_ids");  // the historic rule would size a vector
    EXPECT_ERROR_HAS(DrafterConfig::from_json(d), "outside");
}

TEST(DrafterConfig, MadeFromTargetMatchesTheReleasedOne) {
    const auto t = TargetConfig::from_json(qwen3_8b_json());
    const auto d = make_drafter_config(t, 5, 16, 151669, {});
    EXPECT_EQ(d.to_json(), qwen3_8b_drafter_json());
    EXPECT_TRUE(drafter_target_mismatches(d, t).empty());

    // Shallow targets still get distinct feature layers.
    TargetConfig small = t;
    small.num_hidden_layers = 6;
    EXPECT_EQ(make_drafter_config(small, 1, 16, 5, {}).target_layer_ids,
              (std::vector<int64_t>{1, 2, 3}));
    small.num_hidden_layers = 2;
    EXPECT_EQ(make_drafter_config(small, 1, 16, 5, {}).target_layer_ids, (std::vector<int64_t>{0}));
    EXPECT_ERROR_HAS(make_drafter_config(t, 5, 16, 151669, {0, 40}), "target_layer_ids[1]=40");

    // A drafter for another target.
    const auto l = TargetConfig::from_json(llama31_json());
    const auto mism = drafter_target_mismatches(d, l);
    ASSERT_EQ(mism.size(), 3u);
    EXPECT_NE(mism[0].find("vocab_size=151936 but the target's is 128256"), std::string::npos);
    EXPECT_NE(mism[1].find("num_target_layers=36 but the target has 32"), std::string::npos);
    EXPECT_NE(mism[2].find("target_layer_ids[4]=33"), std::string::npos);
}

TEST(DrafterConfig, SaveLoadRoundTrip) {
    test::TempDir dir;
    const auto d = DrafterConfig::from_json(qwen3_8b_drafter_json());
    d.save(dir.path());
    EXPECT_EQ(read_json_file(dir / "config.json"), qwen3_8b_drafter_json());
    EXPECT_EQ(DrafterConfig::load(dir.path()).to_json(), d.to_json());
    EXPECT_ERROR_HAS(TargetConfig::load(dir.path()), "DFlash drafter config");
    DrafterConfig bad = d;
    bad.mask_token_id = -3;
    EXPECT_ERROR_HAS(bad.save(dir.path()), "refusing to save");
}

}  // namespace
}  // namespace dflash

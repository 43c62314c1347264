// config.json of the hybrid linear-attention targets: Qwen3-Next (flat, full_attention_interval),
// Qwen3.5 text configs and the multimodal wrapper (text_config, top-level tie_word_embeddings),
// partial rotary in rope_parameters or at the top level, the MoE keys with the shared expert, the
// to_json round trip, and every bad input refused naming the file and the key.
#include <gtest/gtest.h>

#include <fstream>

#include "core/atomic_file.h"
#include "model/hf_config.h"
#include "model/tiny_hybrid_models.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using nlohmann::json;
using test::error_of;

#define EXPECT_ERROR_HAS(stmt, needle)                                            \
    do {                                                                          \
        const std::string msg_ = error_of([&] { stmt; });                         \
        EXPECT_NE(msg_.find(needle), std::string::npos) << "error was: " << msg_; \
    } while (0)

// Qwen3-Next-80B-A3B's keys (legacy spelling: top-level rope_theta and partial_rotary_factor,
// no layer_types).
json qwen3_next_json() {
    return json::parse(R"({
      "architectures": ["Qwen3NextForCausalLM"], "attention_bias": false, "bos_token_id": 151643,
      "decoder_sparse_step": 1, "eos_token_id": 151645, "full_attention_interval": 4,
      "head_dim": 256, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5120,
      "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
      "linear_num_value_heads": 32, "linear_value_head_dim": 128,
      "max_position_embeddings": 262144, "mlp_only_layers": [], "model_type": "qwen3_next",
      "moe_intermediate_size": 512, "norm_topk_prob": true, "num_attention_heads": 16,
      "num_experts": 512, "num_experts_per_tok": 10, "num_hidden_layers": 48,
      "num_key_value_heads": 2, "partial_rotary_factor": 0.25, "rms_norm_eps": 1e-06,
      "rope_scaling": null, "rope_theta": 10000000, "shared_expert_intermediate_size": 512,
      "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 151936})");
}

// Qwen3.5-35B-A3B as published: the multimodal wrapper.
json qwen3_5_moe_wrapper_json() {
    json lt = json::array();
    for (int i = 0; i < 40; ++i)
        lt.push_back((i + 1) % 4 == 0 ? "full_attention" : "linear_attention");
    json text = json::parse(R"({
      "model_type": "qwen3_5_moe_text", "hidden_size": 2048, "num_hidden_layers": 40,
      "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
      "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
      "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "num_experts": 256,
      "num_experts_per_tok": 8, "moe_intermediate_size": 512,
      "shared_expert_intermediate_size": 512, "vocab_size": 248320, "rms_norm_eps": 1e-06,
      "max_position_embeddings": 262144, "attn_output_gate": true, "eos_token_id": 248044,
      "rope_parameters": {"rope_type": "default", "rope_theta": 10000000,
                          "partial_rotary_factor": 0.25, "mrope_section": [11, 11, 10],
                          "mrope_interleaved": true}})");
    text["layer_types"] = lt;
    json j = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
              {"model_type", "qwen3_5_moe"},
              {"tie_word_embeddings", false},
              {"text_config", text},
              {"vision_config", {{"depth", 27}, {"hidden_size", 1152}}}};
    return j;
}

TEST(HybridConfig, Qwen3NextAsPublished) {
    const TargetConfig c = TargetConfig::from_json(qwen3_next_json());
    EXPECT_EQ(c.model_type, "qwen3_next");
    EXPECT_TRUE(c.hybrid());
    EXPECT_TRUE(c.qk_norm);
    EXPECT_TRUE(c.attn_output_gate);
    EXPECT_EQ(c.rotary_dim(), 64);
    EXPECT_EQ(c.rope.theta, 1e7);
    ASSERT_EQ(c.layer_types.size(), 48u);
    // Every 4th layer is full attention (layers 3, 7, ...).
    for (int64_t i = 0; i < 48; ++i) EXPECT_EQ(c.is_linear_layer(i), (i + 1) % 4 != 0) << i;
    EXPECT_EQ(c.num_linear_layers(), 36);
    EXPECT_EQ(c.linear_conv_dim(), 2 * 16 * 128 + 32 * 128);
    EXPECT_EQ(c.num_experts, 512);
    EXPECT_EQ(c.shared_expert_intermediate_size, 512);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.num_moe_layers(), 48);
    EXPECT_FALSE(c.multimodal_wrapper);
}

TEST(HybridConfig, Qwen3_5MoeWrapperReadsItsTextConfig) {
    const TargetConfig c = TargetConfig::from_json(qwen3_5_moe_wrapper_json());
    EXPECT_EQ(c.model_type, "qwen3_5_moe");
    EXPECT_TRUE(c.multimodal_wrapper);
    EXPECT_EQ(c.hidden_size, 2048);
    EXPECT_EQ(c.num_hidden_layers, 40);
    EXPECT_EQ(c.rotary_dim(), 64);
    EXPECT_EQ(c.mrope_section, (std::vector<int64_t>{11, 11, 10}));
    // No intermediate_size: the experts' width stands in (no dense layer uses it).
    EXPECT_EQ(c.intermediate_size, 512);
    EXPECT_TRUE(c.norm_topk_prob);  // always renormalised, no key
    EXPECT_EQ(c.num_moe_layers(), 40);
    EXPECT_EQ(c.num_linear_layers(), 30);
    EXPECT_EQ(c.eos_token_id, 248044);
    // tie_word_embeddings is the wrapper's.
    json j = qwen3_5_moe_wrapper_json();
    j["tie_word_embeddings"] = true;
    EXPECT_TRUE(TargetConfig::from_json(j).tie_word_embeddings);
}

TEST(HybridConfig, DefaultsOfAbsentKeys) {
    json j = qwen3_next_json();
    for (const char* k : {"partial_rotary_factor", "full_attention_interval",
                          "linear_conv_kernel_dim", "shared_expert_intermediate_size"})
        j.erase(k);
    const TargetConfig c = TargetConfig::from_json(j);
    EXPECT_EQ(c.rotary_dim(), 64);  // 0.25 of 256
    EXPECT_TRUE(c.is_linear_layer(0));
    EXPECT_FALSE(c.is_linear_layer(3));
    EXPECT_EQ(c.linear_conv_kernel_dim, 4);
    EXPECT_EQ(c.shared_expert_intermediate_size, 512);
}

TEST(HybridConfig, RoundTripsThroughToJsonAsTheTextModel) {
    for (const TargetConfig& c : {test::tiny_qwen3_5_config(), test::tiny_qwen3_next_config(),
                                  test::tiny_qwen3_5_moe_config()}) {
        ASSERT_TRUE(c.problems().empty()) << c.model_type << ": " << c.problems().front();
        const json j = c.to_json();
        EXPECT_EQ(j["model_type"],
                  c.model_type == "qwen3_next" ? "qwen3_next" : c.model_type + "_text");
        EXPECT_EQ(j["rope_parameters"]["partial_rotary_factor"], 0.5);
        const TargetConfig r = TargetConfig::from_json(j);
        EXPECT_EQ(r.to_json(), j) << c.model_type;
        EXPECT_EQ(r.layer_types, c.layer_types);
        EXPECT_EQ(r.linear_value_head_dim, 10);
        EXPECT_EQ(r.shared_expert_intermediate_size, c.shared_expert_intermediate_size);
        EXPECT_EQ(r.mlp_only_layers, c.mlp_only_layers);
    }
    // The wrapper is saved as its text model (what save() writes).
    const TargetConfig w = TargetConfig::from_json(qwen3_5_moe_wrapper_json());
    const json j = w.to_json();
    EXPECT_EQ(j["model_type"], "qwen3_5_moe_text");
    EXPECT_EQ(j["architectures"][0], "Qwen3_5MoeForCausalLM");
    EXPECT_FALSE(j.contains("text_config"));
    EXPECT_EQ(TargetConfig::from_json(j).rotary_dim(), 64);
}

TEST(HybridConfig, BadInputNamesTheKey) {
    json j = qwen3_next_json();
    j["layer_types"] = json::array({"linear_attention", "full_attention"});
    EXPECT_ERROR_HAS(TargetConfig::from_json(j),
                     "layer_types lists 2 layers but num_hidden_layers=48");
    json lt = json::array();
    for (int i = 0; i < 48; ++i) lt.push_back(i == 5 ? "sliding_attention" : "full_attention");
    j["layer_types"] = lt;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "layer_types[5] is 'sliding_attention'");
    j = qwen3_next_json();
    j["linear_num_value_heads"] = 24;
    j["linear_num_key_heads"] = 16;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j),
                     "linear_num_value_heads=24 is not a multiple of linear_num_key_heads=16");
    j = qwen3_next_json();
    j["partial_rotary_factor"] = 0.001;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "partial_rotary_factor=0.001");
    j = qwen3_5_moe_wrapper_json();
    j["text_config"]["model_type"] = "qwen3_5_text";
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "text_config.model_type");
    // Through load(): the file is named.
    test::TempDir dir("hybrid_config_bad");
    j = qwen3_next_json();
    j["layer_types"] = json::array({"linear_attention"});
    write_text_atomic(dir / "config.json", j.dump());
    const std::string msg = error_of([&] { TargetConfig::load(dir.path()); });
    EXPECT_TRUE(test::has(msg, (dir / "config.json").string())) << msg;
    EXPECT_TRUE(test::has(msg, "layer_types")) << msg;
}

TEST(HybridConfig, DrafterForAHybridTargetIsPlainQwen3) {
    TargetConfig t = TargetConfig::from_json(qwen3_5_moe_wrapper_json());
    const DrafterConfig d = make_drafter_config(t, 5, 16, 248070, {1, 10, 19, 28, 37});
    EXPECT_EQ(d.layer.model_type, "qwen3");
    EXPECT_FALSE(d.layer.hybrid());
    EXPECT_EQ(d.layer.partial_rotary_factor, 1.0);
    EXPECT_FALSE(d.layer.attn_output_gate);
    EXPECT_EQ(d.layer.shared_expert_intermediate_size, 0);
    EXPECT_TRUE(d.problems().empty());
}

}  // namespace
}  // namespace dflash

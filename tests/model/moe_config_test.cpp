// config.json of mixture-of-experts targets: qwen3_moe (Qwen3-30B-A3B) and gpt_oss (gpt-oss-20b)
// as published, the dense/MoE layer rule, sliding-window layers, YaRN, the to_json round trip and
// every bad input refused with the key named.
#include <gtest/gtest.h>

#include "model/hf_config.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using nlohmann::json;
using test::error_of;

// Qwen3-30B-A3B's config.json values (a published copy's keys).
json qwen3_30b_a3b_json() {
    return json::parse(R"({
      "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false,
      "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1,
      "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
      "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 40960,
      "max_window_layers": 48, "mlp_only_layers": [], "model_type": "qwen3_moe",
      "moe_intermediate_size": 768, "norm_topk_prob": true, "num_attention_heads": 32,
      "num_experts": 128, "num_experts_per_tok": 8, "num_hidden_layers": 48,
      "num_key_value_heads": 4, "output_router_logits": false, "rms_norm_eps": 1e-06,
      "rope_scaling": null, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001,
      "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
      "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");
}

// gpt-oss-20b's config.json values (legacy rope_theta + rope_scaling spelling).
json gpt_oss_20b_json() {
    json lt = json::array();
    for (int i = 0; i < 24; ++i) lt.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    json j = json::parse(R"({
      "architectures": ["GptOssForCausalLM"], "attention_bias": true, "attention_dropout": 0.0,
      "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu",
      "hidden_size": 2880, "initial_context_length": 4096, "initializer_range": 0.02,
      "intermediate_size": 2880, "max_position_embeddings": 131072, "model_type": "gpt_oss",
      "num_attention_heads": 64, "num_experts_per_tok": 4, "num_hidden_layers": 24,
      "num_key_value_heads": 8, "num_local_experts": 32, "output_router_logits": false,
      "pad_token_id": 199999, "rms_norm_eps": 1e-05,
      "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0,
                       "original_max_position_embeddings": 4096, "rope_type": "yarn",
                       "truncate": false},
      "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128,
      "swiglu_limit": 7.0, "tie_word_embeddings": false, "transformers_version": "4.55.0.dev0",
      "use_cache": true, "vocab_size": 201088,
      "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn",
        "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}})");
    j["layer_types"] = lt;
    return j;
}

#define EXPECT_ERROR_HAS(stmt, needle)                                            \
    do {                                                                          \
        const std::string msg_ = error_of([&] { stmt; });                         \
        EXPECT_NE(msg_.find(needle), std::string::npos) << "error was: " << msg_; \
    } while (0)

TEST(MoeConfig, ParsesQwen3_30bA3b) {
    const TargetConfig c = TargetConfig::from_json(qwen3_30b_a3b_json());
    EXPECT_EQ(c.model_type, "qwen3_moe");
    EXPECT_TRUE(c.qk_norm);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_EQ(c.num_experts, 128);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_EQ(c.moe_intermediate_size, 768);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_EQ(c.num_moe_layers(), 48);
    EXPECT_EQ(c.layer_window(3), 0);
    EXPECT_FALSE(c.attention_sinks);
    EXPECT_EQ(c.swiglu_limit, 0.0);
}

TEST(MoeConfig, DenseLayersFollowMlpOnlyLayersAndTheSparseStep) {
    json j = qwen3_30b_a3b_json();
    j["num_hidden_layers"] = 6;
    j["mlp_only_layers"] = {1};
    j["decoder_sparse_step"] = 2;
    const TargetConfig c = TargetConfig::from_json(j);
    // (i+1) % 2 == 0 -> 1, 3, 5; 1 is listed as dense.
    const std::vector<bool> want = {false, false, false, true, false, true};
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(c.is_moe_layer(i), want[i]) << "layer " << i;
    EXPECT_EQ(c.num_moe_layers(), 2);
    // transformers 5 spells the count num_local_experts; both spellings must agree.
    json v5 = j;
    v5.erase("num_experts");
    v5["num_local_experts"] = 9;
    EXPECT_EQ(TargetConfig::from_json(v5).num_experts, 9);
    v5["num_experts"] = 10;
    EXPECT_ERROR_HAS(TargetConfig::from_json(v5), "disagree on the number of experts");
    j["num_experts"] = 0;
    j["num_experts_per_tok"] = 0;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "num_experts=0 is outside");
}

TEST(MoeConfig, ParsesGptOss20b) {
    const TargetConfig c = TargetConfig::from_json(gpt_oss_20b_json());
    EXPECT_TRUE(c.gpt_oss());
    EXPECT_FALSE(c.qk_norm);
    EXPECT_TRUE(c.attention_bias);
    EXPECT_TRUE(c.qkv_bias());
    EXPECT_TRUE(c.o_bias());
    EXPECT_TRUE(c.attention_sinks);
    EXPECT_EQ(c.num_experts, 32);
    EXPECT_EQ(c.num_experts_per_tok, 4);
    EXPECT_EQ(c.moe_intermediate_size, 2880);
    EXPECT_EQ(c.num_moe_layers(), 24);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.layer_window(0), 128);
    EXPECT_EQ(c.layer_window(1), 0);
    EXPECT_EQ(c.layer_window(22), 128);
    EXPECT_DOUBLE_EQ(c.swiglu_limit, 7.0);
    EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_DOUBLE_EQ(c.rope.theta, 150000.0);
    const RopeScaling& y = c.rope.scaling;
    EXPECT_EQ(y.type, RopeScalingType::yarn);
    EXPECT_DOUBLE_EQ(y.factor, 32.0);
    EXPECT_EQ(y.original_max_position, 4096);
    EXPECT_DOUBLE_EQ(y.beta_fast, 32.0);
    EXPECT_DOUBLE_EQ(y.beta_slow, 1.0);
    EXPECT_FALSE(y.truncate);
    EXPECT_EQ(c.eos_token_id, 200002);
}

TEST(MoeConfig, ReadsTransformers5RopeParametersAndItsDefaults) {
    // The tiny instance the parity fixtures use, as transformers 5 writes it: no layer_types
    // (sliding on even layers), rope_parameters, experts_per_token absent.
    const json j = json::parse(R"({"model_type": "gpt_oss", "vocab_size": 128, "hidden_size": 64,
      "intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4,
      "num_key_value_heads": 2, "head_dim": 16, "num_local_experts": 4,
      "num_experts_per_tok": 2, "sliding_window": 4, "max_position_embeddings": 64,
      "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                          "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false,
                          "original_max_position_embeddings": 16}})");
    const TargetConfig c = TargetConfig::from_json(j);
    EXPECT_EQ(c.layer_types.size(), 4u);
    EXPECT_EQ(c.layer_window(0), 4);
    EXPECT_EQ(c.layer_window(3), 0);
    EXPECT_DOUBLE_EQ(c.rope.theta, 150000.0);
    EXPECT_EQ(c.rope.scaling.type, RopeScalingType::yarn);
    EXPECT_EQ(c.rope.scaling.original_max_position, 16);
    EXPECT_TRUE(c.attention_bias);  // GptOssConfig's default
    EXPECT_DOUBLE_EQ(c.swiglu_limit, 7.0);
    // YaRN without original_max_position_embeddings: the model's own context.
    json k = j;
    k["rope_parameters"].erase("original_max_position_embeddings");
    EXPECT_EQ(TargetConfig::from_json(k).rope.scaling.original_max_position, 64);
}

TEST(MoeConfig, ToJsonRoundTrips) {
    json q = qwen3_30b_a3b_json();
    q["num_hidden_layers"] = 5;
    q["mlp_only_layers"] = {0, 3};
    q["decoder_sparse_step"] = 1;
    q["norm_topk_prob"] = false;
    for (const json& src : {q, gpt_oss_20b_json()}) {
        const TargetConfig a = TargetConfig::from_json(src);
        const json out = a.to_json();
        const TargetConfig b = TargetConfig::from_json(out);
        EXPECT_EQ(b.to_json(), out);
        EXPECT_EQ(b.model_type, a.model_type);
        EXPECT_EQ(b.num_experts, a.num_experts);
        EXPECT_EQ(b.num_experts_per_tok, a.num_experts_per_tok);
        EXPECT_EQ(b.moe_intermediate_size, a.moe_intermediate_size);
        EXPECT_EQ(b.norm_topk_prob, a.norm_topk_prob);
        EXPECT_EQ(b.mlp_only_layers, a.mlp_only_layers);
        EXPECT_EQ(b.layer_types, a.layer_types);
        EXPECT_EQ(b.sliding_window, a.sliding_window);
        EXPECT_EQ(b.attention_sinks, a.attention_sinks);
        EXPECT_EQ(b.attention_bias, a.attention_bias);
        EXPECT_EQ(b.rope.scaling.type, a.rope.scaling.type);
        EXPECT_EQ(b.rope.scaling.truncate, a.rope.scaling.truncate);
        EXPECT_EQ(b.rope.scaling.original_max_position, a.rope.scaling.original_max_position);
        for (int64_t i = 0; i < a.num_hidden_layers; ++i)
            EXPECT_EQ(b.is_moe_layer(i), a.is_moe_layer(i));
    }
    EXPECT_EQ(TargetConfig::from_json(q).to_json()["architectures"][0], "Qwen3MoeForCausalLM");
    EXPECT_EQ(TargetConfig::from_json(gpt_oss_20b_json()).to_json()["architectures"][0],
              "GptOssForCausalLM");
}

TEST(MoeConfig, RefusesBadExpertCounts) {
    json j = qwen3_30b_a3b_json();
    j["num_experts_per_tok"] = 129;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "num_experts_per_tok=129 exceeds num_experts=128");
    j = qwen3_30b_a3b_json();
    j["num_experts_per_tok"] = 0;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "num_experts_per_tok=0 must be at least 1");
    j = gpt_oss_20b_json();
    j["num_local_experts"] = 3;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "exceeds num_local_experts=3");
    j = qwen3_30b_a3b_json();
    j["num_experts"] = 100000;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "num_experts=100000 is outside");
    j = qwen3_30b_a3b_json();
    j["moe_intermediate_size"] = 0;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "moe_intermediate_size=0 is outside");
    j = qwen3_30b_a3b_json();
    j["decoder_sparse_step"] = 0;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "decoder_sparse_step=0");
    j = qwen3_30b_a3b_json();
    j["mlp_only_layers"] = {48};
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "mlp_only_layers lists layer 48");
    j = qwen3_30b_a3b_json();
    j["mlp_only_layers"] = "all";
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "'mlp_only_layers'");
}

TEST(MoeConfig, RefusesRouterKindsItDoesNotRun) {
    json j = qwen3_30b_a3b_json();
    j["scoring_func"] = "sigmoid";
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "'scoring_func' is \"sigmoid\"");
    j = qwen3_30b_a3b_json();
    j["topk_method"] = "noaux_tc";
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "'topk_method' is \"noaux_tc\"");
    j = qwen3_30b_a3b_json();
    j["shared_expert_intermediate_size"] = 512;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "'shared_expert_intermediate_size'");
    j = qwen3_30b_a3b_json();
    j["scoring_func"] = "softmax";  // what the supported routers do: accepted
    EXPECT_NO_THROW(TargetConfig::from_json(j));
}

TEST(MoeConfig, RefusesBadWindowsAndLayerTypes) {
    json j = gpt_oss_20b_json();
    j["sliding_window"] = 0;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "sliding_window=0 must be at least 1");
    j = gpt_oss_20b_json();
    j["layer_types"].erase(j["layer_types"].size() - 1);
    EXPECT_ERROR_HAS(TargetConfig::from_json(j),
                     "layer_types lists 23 layers but num_hidden_layers=24");
    j = gpt_oss_20b_json();
    j["layer_types"][3] = "linear_attention";
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "layer_types[3] is 'linear_attention'");
    j = qwen3_30b_a3b_json();
    j["num_hidden_layers"] = 2;
    j["layer_types"] = {"sliding_attention", "full_attention"};
    j["sliding_window"] = 8;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "which model_type 'qwen3_moe' does not use");
    // All-full layer_types (transformers 5 writes them for dense models) are fine anywhere.
    j["layer_types"] = {"full_attention", "full_attention"};
    EXPECT_NO_THROW(TargetConfig::from_json(j));
}

TEST(MoeConfig, RefusesBadRope) {
    json j = gpt_oss_20b_json();
    j["rope_scaling"]["rope_type"] = "longrope";
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "rope_scaling type 'longrope' is unsupported");
    j = gpt_oss_20b_json();
    j["rope_scaling"]["beta_fast"] = 0.5;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "beta_fast=0.5 must exceed beta_slow=1");
    j = gpt_oss_20b_json();
    j["rope_scaling"]["mscale"] = 0.707;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "'mscale'");
    j = gpt_oss_20b_json();
    j["rope_scaling"].erase("factor");
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "'factor'");
    j = gpt_oss_20b_json();
    j["swiglu_limit"] = -1;
    EXPECT_ERROR_HAS(TargetConfig::from_json(j), "swiglu_limit=-1 must be positive");
}

TEST(MoeConfig, DenseTypesHaveNoExperts) {
    TargetConfig c = TargetConfig::from_json(qwen3_30b_a3b_json());
    c.model_type = "qwen3";
    bool found = false;
    for (const auto& p : c.problems())
        found = found || p.find("has no experts") != std::string::npos;
    EXPECT_TRUE(found);
}

}  // namespace
}  // namespace dflash

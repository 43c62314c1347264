// Tensor names and shapes of targets and drafters (docs/formats.md "DFlash drafter directory"),
// computed from configs at full size without allocating anything; the comparison of stored tensors
// with a layout that inspect and the loaders share.
#include "model/tensor_layout.h"

#include <map>
#include <set>

#include "support/test_util.h"

namespace dflash {
namespace {

using nlohmann::json;
using Shapes = std::map<std::string, std::vector<int64_t>>;

Shapes as_map(const std::vector<TensorSpec>& specs) {
    Shapes m;
    for (const auto& s : specs) {
        EXPECT_TRUE(m.emplace(s.name, s.shape).second) << "duplicate " << s.name;
    }
    return m;
}

int64_t total_params(const std::vector<TensorSpec>& specs) {
    int64_t n = 0;
    for (const auto& s : specs) n += s.numel();
    return n;
}

// The docs/formats.md config: Qwen3-8B-DFlash-b16.
DrafterConfig qwen3_8b_drafter() {
    TargetConfig t;
    t.model_type = "qwen3";
    t.hidden_size = 4096;
    t.intermediate_size = 12288;
    t.num_hidden_layers = 36;
    t.num_attention_heads = 32;
    t.num_key_value_heads = 8;
    t.head_dim = 128;
    t.vocab_size = 151936;
    t.max_position_embeddings = 40960;
    t.rms_norm_eps = 1e-6;
    t.rope.theta = 1000000;
    return make_drafter_config(t, 5, 16, 151669, {1, 9, 17, 25, 33});
}

TEST(TensorLayout, Qwen3_8bDrafterIsExactlyThe58TensorsOfTheSpec) {
    // docs/formats.md's table, written out independently of the code under test.
    Shapes want = {
        {"fc.weight", {4096, 20480}}, {"hidden_norm.weight", {4096}}, {"norm.weight", {4096}}};
    for (int i = 0; i < 5; ++i) {
        const std::string p = "layers." + std::to_string(i) + ".";
        want[p + "input_layernorm.weight"] = {4096};
        want[p + "post_attention_layernorm.weight"] = {4096};
        want[p + "self_attn.q_proj.weight"] = {4096, 4096};
        want[p + "self_attn.k_proj.weight"] = {1024, 4096};
        want[p + "self_attn.v_proj.weight"] = {1024, 4096};
        want[p + "self_attn.o_proj.weight"] = {4096, 4096};
        want[p + "self_attn.q_norm.weight"] = {128};
        want[p + "self_attn.k_norm.weight"] = {128};
        want[p + "mlp.gate_proj.weight"] = {12288, 4096};
        want[p + "mlp.up_proj.weight"] = {12288, 4096};
        want[p + "mlp.down_proj.weight"] = {4096, 12288};
    }
    ASSERT_EQ(want.size(), 58u);
    const auto specs = drafter_tensor_specs(qwen3_8b_drafter());
    EXPECT_EQ(specs.size(), 58u);
    EXPECT_EQ(as_map(specs), want);
    // ~1.05B parameters, ~2.1 GB in bf16 (docs/formats.md).
    EXPECT_EQ(total_params(specs), 1048626432);
}

TEST(TensorLayout, Qwen3_8bDrafterConfigJsonHasExactlyTheSpecKeys) {
    const json j = qwen3_8b_drafter().to_json();
    const json want = {
        {"architectures", {"DFlashDraftModel"}},
        {"auto_map", {{"AutoModel", "dflash.DFlashDraftModel"}}},
        {"model_type", "qwen3"},
        {"block_size", 16},
        {"dflash_config", {{"mask_token_id", 151669}, {"target_layer_ids", {1, 9, 17, 25, 33}}}},
        {"num_target_layers", 36},
        {"num_hidden_layers", 5},
        {"hidden_size", 4096},
        {"intermediate_size", 12288},
        {"num_attention_heads", 32},
        {"num_key_value_heads", 8},
        {"head_dim", 128},
        {"hidden_act", "silu"},
        {"rms_norm_eps", 1e-6},
        {"rope_theta", 1000000},
        {"rope_scaling", nullptr},
        {"max_position_embeddings", 40960},
        {"layer_types", std::vector<std::string>(5, "full_attention")},
        {"attention_bias", false},
        {"tie_word_embeddings", false},
        {"vocab_size", 151936},
        {"dtype", "bfloat16"},
        {"sliding_window", nullptr},
        {"use_sliding_window", false},
    };
    ASSERT_EQ(want.size(), 24u);
    std::set<std::string> got_keys, want_keys;
    for (const auto& [k, v] : j.items()) got_keys.insert(k);
    for (const auto& [k, v] : want.items()) want_keys.insert(k);
    EXPECT_EQ(got_keys, want_keys);
    for (const auto& [k, v] : want.items()) EXPECT_EQ(j[k], v) << k;
    EXPECT_EQ(j["dflash_config"].size(), 2u);
}

TEST(TensorLayout, Qwen3AndLlamaTargetsMatchTheirPublishedParameterCounts) {
    TargetConfig q = qwen3_8b_drafter().layer;
    q.num_hidden_layers = 36;
    const auto qs = target_tensor_specs(q);
    EXPECT_EQ(qs.size(), 1u + 36 * 11 + 2);
    EXPECT_EQ(total_params(qs), 8190735360);  // Qwen3-8B
    const auto qm = as_map(qs);
    EXPECT_EQ(qm.at("model.embed_tokens.weight"), (std::vector<int64_t>{151936, 4096}));
    EXPECT_EQ(qm.at("lm_head.weight"), (std::vector<int64_t>{151936, 4096}));
    EXPECT_EQ(qm.at("model.layers.35.self_attn.k_norm.weight"), (std::vector<int64_t>{128}));
    EXPECT_EQ(qm.at("model.norm.weight"), (std::vector<int64_t>{4096}));

    TargetConfig l;
    l.model_type = "llama";
    l.qk_norm = false;
    l.hidden_size = 4096;
    l.intermediate_size = 14336;
    l.num_hidden_layers = 32;
    l.num_attention_heads = 32;
    l.num_key_value_heads = 8;
    l.head_dim = 128;
    l.vocab_size = 128256;
    const auto ls = target_tensor_specs(l);
    EXPECT_EQ(ls.size(), 1u + 32 * 9 + 2);
    EXPECT_EQ(total_params(ls), 8030261248);  // Llama-3.1-8B
    EXPECT_FALSE(as_map(ls).count("model.layers.0.self_attn.q_norm.weight"));

    // Tied embeddings drop lm_head; attention_bias adds q/k/v/o biases.
    l.tie_word_embeddings = true;
    l.attention_bias = true;
    const auto tm = as_map(target_tensor_specs(l));
    EXPECT_FALSE(tm.count("lm_head.weight"));
    EXPECT_EQ(tm.at("model.layers.3.self_attn.q_proj.bias"), (std::vector<int64_t>{4096}));
    EXPECT_EQ(tm.at("model.layers.3.self_attn.k_proj.bias"), (std::vector<int64_t>{1024}));
    EXPECT_EQ(tm.at("model.layers.3.self_attn.v_proj.bias"), (std::vector<int64_t>{1024}));
    EXPECT_EQ(tm.at("model.layers.3.self_attn.o_proj.bias"), (std::vector<int64_t>{4096}));
    EXPECT_EQ(tm.size(), 1u + 32 * 13 + 1);
}

TEST(TensorLayout, ParamGroups) {
    EXPECT_EQ(param_group("model.embed_tokens.weight"), ParamGroup::embeddings);
    EXPECT_EQ(param_group("lm_head.weight"), ParamGroup::embeddings);
    EXPECT_EQ(param_group("model.layers.0.self_attn.q_proj.weight"), ParamGroup::attention);
    EXPECT_EQ(param_group("layers.1.self_attn.o_proj.bias"), ParamGroup::attention);
    EXPECT_EQ(param_group("layers.1.self_attn.q_norm.weight"), ParamGroup::norms);
    EXPECT_EQ(param_group("layers.1.input_layernorm.weight"), ParamGroup::norms);
    EXPECT_EQ(param_group("hidden_norm.weight"), ParamGroup::norms);
    EXPECT_EQ(param_group("norm.weight"), ParamGroup::norms);
    EXPECT_EQ(param_group("model.layers.2.mlp.down_proj.weight"), ParamGroup::mlp);
    EXPECT_EQ(param_group("fc.weight"), ParamGroup::fc);
    EXPECT_EQ(param_group("something.else"), ParamGroup::other);
    EXPECT_EQ(param_group_name(ParamGroup::mlp), "mlp");
}

TEST(TensorLayout, CompareLayoutFindsEveryKindOfDifference) {
    using Kind = LayoutDifference::Kind;
    const std::vector<TensorSpec> layout = {{"b.weight", {2, 3}}, {"a.weight", {4}}, {"c", {1}}};
    std::map<std::string, StoredTensor> stored = {
        {"a.weight", {"F32", {5}}},               // misshapen
        {"c", {"I32", {1}}},                      // not a float
        {"extra.weight", {"BF16", {7}}},          // unexpected
        {"lm_head.weight", {"F32", {9, 2}}},      // harmless next to tied embeddings
        {"x.rotary_emb.inv_freq", {"F32", {8}}},  // a RoPE buffer
        {"model.embed_tokens.weight", {"F32", {9, 2}}},
    };
    const LayoutComparison target = compare_layout(layout, stored, /*tied=*/true, false);
    std::vector<std::pair<Kind, std::string>> got;
    for (const auto& d : target.differences) got.emplace_back(d.kind, d.name);
    // Layout order for what the layout lacks, name order for what the file adds.
    EXPECT_EQ(got, (std::vector<std::pair<Kind, std::string>>{
                       {Kind::missing, "b.weight"},
                       {Kind::misshapen, "a.weight"},
                       {Kind::wrong_dtype, "c"},
                       {Kind::unexpected, "extra.weight"},
                       {Kind::unexpected, "model.embed_tokens.weight"}}));
    EXPECT_EQ(target.notes.size(), 2u);
    EXPECT_EQ(target.differences[0].sentence(), "missing tensor 'b.weight' [2, 3]");
    EXPECT_EQ(target.differences[1].sentence(),
              "tensor 'a.weight' has shape [5] but the config implies [4]");
    // Untied, lm_head is unexpected; in a drafter, stored embeddings get their own reason.
    const LayoutComparison drafter = compare_layout(layout, stored, false, /*drafter=*/true);
    std::map<std::string, Kind> by_name;
    for (const auto& d : drafter.differences) by_name[d.name] = d.kind;
    EXPECT_EQ(by_name.at("lm_head.weight"), Kind::stored_embedding);
    EXPECT_EQ(by_name.at("model.embed_tokens.weight"), Kind::stored_embedding);
    EXPECT_TRUE(test::has(drafter.differences.back().sentence(), "borrows the target's"));
    // A checkpoint that is exactly the layout has nothing to say.
    stored = {{"b.weight", {"BF16", {2, 3}}}, {"a.weight", {"F16", {4}}}, {"c", {"F32", {1}}}};
    EXPECT_TRUE(compare_layout(layout, stored, false, true).differences.empty());
    // DeepSpec drafters keep frozen copies of the target's embedding and lm_head [V, D]: noted
    // and ignored; any other shape under those names (a pruned vocabulary) is still refused.
    stored["embed_tokens.weight"] = {"BF16", {9, 2}};
    stored["lm_head.weight"] = {"BF16", {9, 2}};
    const LayoutComparison deepspec = compare_layout(layout, stored, false, true, {9, 2});
    EXPECT_TRUE(deepspec.differences.empty());
    ASSERT_EQ(deepspec.notes.size(), 2u);
    EXPECT_TRUE(test::has(deepspec.notes[0], "copy of the target's")) << deepspec.notes[0];
    stored["lm_head.weight"] = {"BF16", {5, 2}};
    const LayoutComparison pruned = compare_layout(layout, stored, false, true, {9, 2});
    ASSERT_EQ(pruned.differences.size(), 1u);
    EXPECT_EQ(pruned.differences[0].kind, Kind::stored_embedding);
}

}  // namespace
}  // namespace dflash

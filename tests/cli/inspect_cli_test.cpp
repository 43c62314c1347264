// `dflash inspect`: reports on sound and broken target/drafter directories, through the library
// function the command prints, and through the built binary (exit status 0 for a sound directory,
// 1 with the problems listed for a broken one, a usage error without DIR). Also what the loader
// refuses before allocating: NaN/Inf weights (named) and config.json shapes out of range or not
// matching the weights.
#include <fstream>
#include <limits>
#include <map>

#include "core/checkpoint_io.h"
#include "model/hf_config.h"
#include "model/inspect.h"
#include "model/target.h"
#include "model/tensor_layout.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::has;
using test::TempDir;

TargetConfig tiny_target() {
    TargetConfig t;
    t.model_type = "qwen3";
    t.hidden_size = 16;
    t.intermediate_size = 32;
    t.num_hidden_layers = 4;
    t.num_attention_heads = 4;
    t.num_key_value_heads = 2;
    t.head_dim = 4;
    t.vocab_size = 64;
    t.max_position_embeddings = 128;
    return t;
}

DrafterConfig tiny_drafter() {
    return make_drafter_config(tiny_target(), 2, 4, 63, {1, 2});
}

// Writes random weights for `specs` into `dir`, leaving out `skip` and changing shapes per
// `reshape`.
void write_weights(const fs::path& dir, const std::vector<TensorSpec>& specs, DType store_as,
                   size_t max_shard, const std::string& skip = "",
                   const std::map<std::string, std::vector<int64_t>>& reshape = {}) {
    Rng rng(7);
    std::vector<HostTensor> owned;
    std::vector<std::pair<std::string, Tensor>> named;
    for (const auto& s : specs) {
        if (s.name == skip) continue;
        auto it = reshape.find(s.name);
        owned.push_back(
            test::random_tensor(Shape(it == reshape.end() ? s.shape : it->second), rng));
        named.emplace_back(s.name, owned.back());
    }
    write_checkpoint(dir, named, store_as, max_shard);
}

TEST(Inspect, SoundDrafterDirectory) {
    TempDir dir;
    const auto d = tiny_drafter();
    d.save(dir.path());
    write_weights(dir.path(), drafter_tensor_specs(d), DType::bf16, size_t{1} << 20);
    const auto r = inspect_directory(dir.path());
    EXPECT_TRUE(r.ok()) << r.text;
    EXPECT_EQ(r.kind, "drafter");
    EXPECT_TRUE(has(r.text, "kind:          drafter (DFlashDraftModel)")) << r.text;
    EXPECT_TRUE(has(r.text, "block_size 4, mask_token_id 63, target_layer_ids [1, 2] of 4"))
        << r.text;
    EXPECT_TRUE(has(r.text, "dtype:         BF16 x25")) << r.text;  // 2*11 + 3 tensors
    // fc [16, 32] = 512; per layer: q 256, k 128, v 128, o 256, mlp 3*512, norms 2*16 + 2*4.
    const int64_t per_layer = 256 + 128 + 128 + 256 + 3 * 512 + 2 * 16 + 2 * 4;
    const int64_t total = 512 + 2 * 16 + 2 * per_layer;
    ASSERT_EQ(total, 5232);
    EXPECT_TRUE(has(r.text, "parameters:    5,232 (5.2K) from checkpoint")) << r.text;
    EXPECT_TRUE(has(r.text, fmt::format("  {:<12} {:>16} (512)\n", "fc", "512"))) << r.text;
    EXPECT_TRUE(has(r.text, fmt::format("  {:<12} {:>16} (3.1K)\n", "mlp", "3,072"))) << r.text;
    EXPECT_TRUE(has(r.text, "layers.1.mlp.down_proj.weight")) << r.text;
    EXPECT_TRUE(has(r.text, "status:        OK")) << r.text;
    EXPECT_FALSE(has(inspect_directory(dir.path(), {.list_tensors = false}).text, "tensors ("));
    EXPECT_EQ(inspect_report(dir.path()), r.text);
}

TEST(Inspect, SoundShardedTargetDirectory) {
    TempDir dir;
    const auto t = tiny_target();
    t.save(dir.path());
    write_weights(dir.path(), target_tensor_specs(t), DType::f32, 8192);
    const auto r = inspect_directory(dir.path());
    EXPECT_TRUE(r.ok()) << r.text;
    EXPECT_EQ(r.kind, "target");
    EXPECT_TRUE(has(r.text, "(Qwen3ForCausalLM)")) << r.text;
    EXPECT_TRUE(has(r.text, "shards via model.safetensors.index.json")) << r.text;
    EXPECT_TRUE(has(r.text, "4 layers, hidden 16, intermediate 32, heads 4 (kv 2, head_dim 4)"))
        << r.text;
    // embeddings: embed_tokens + lm_head, 64 x 16 each.
    EXPECT_TRUE(has(r.text, fmt::format("  {:<12} {:>16} (2.0K)\n", "embeddings", "2,048")))
        << r.text;
}

TEST(Inspect, ListsEveryProblemOfABrokenDrafter) {
    TempDir dir;
    const auto d = tiny_drafter();
    d.save(dir.path());
    auto specs = drafter_tensor_specs(d);
    specs.push_back({"layers.0.self_attn.rotary.weight", {3}});
    // Under the target's shape [V, D] (DeepSpec's frozen copies) a note; under another, an error.
    specs.push_back({"model.embed_tokens.weight", {32, 16}});
    specs.push_back({"lm_head.weight", {64, 16}});
    write_weights(dir.path(), specs, DType::f32, size_t{1} << 20, "layers.1.mlp.up_proj.weight",
                  {{"fc.weight", {16, 48}}});
    const auto r = inspect_directory(dir.path());
    EXPECT_FALSE(r.ok());
    ASSERT_EQ(r.problems.size(), 4u) << r.text;
    EXPECT_TRUE(has(r.text, "'model.embed_tokens.weight' [32, 16]: a DFlash drafter borrows"))
        << r.text;
    EXPECT_TRUE(has(r.text, "note: 'lm_head.weight' [64, 16] is a copy of the target's")) << r.text;
    EXPECT_TRUE(has(r.text, "missing tensor 'layers.1.mlp.up_proj.weight' [32, 16]")) << r.text;
    EXPECT_TRUE(has(r.text, "unexpected tensor 'layers.0.self_attn.rotary.weight' [3]")) << r.text;
    EXPECT_TRUE(
        has(r.text, "tensor 'fc.weight' has shape [16, 48] but the config implies [16, 32]"))
        << r.text;
    EXPECT_TRUE(has(r.text, "status:        BROKEN")) << r.text;
}

TEST(Inspect, MissingConfigAndInconsistentConfigAreReported) {
    TempDir dir;
    const auto d = tiny_drafter();
    write_weights(dir.path(), drafter_tensor_specs(d), DType::f32, size_t{1} << 20);
    auto r = inspect_directory(dir.path());
    EXPECT_FALSE(r.ok());
    EXPECT_EQ(r.kind, "drafter");  // guessed from fc.weight
    EXPECT_TRUE(has(r.text, "no config.json in")) << r.text;
    EXPECT_TRUE(has(r.text, "fc.weight")) << r.text;  // the tensors are still listed

    auto j = d.to_json();
    j["dflash_config"]["target_layer_ids"] = {1, 4};
    j["dflash_config"]["mask_token_id"] = 64;
    std::ofstream(dir / "config.json") << j.dump();
    r = inspect_directory(dir.path());
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(has(r.text, "target_layer_ids[1]=4 but the target has 4 layers (ids 0..3)"))
        << r.text;
    EXPECT_TRUE(has(r.text, "mask_token_id=64 is outside the target vocabulary")) << r.text;
    // Each config problem is its own entry, and the tensors were still checked (and are fine).
    EXPECT_EQ(r.problems.size(), 2u) << r.text;

    // A config problem and a tensor problem together.
    j["dflash_config"]["target_layer_ids"] = {0, 1, 2};
    std::ofstream(dir / "config.json") << j.dump();
    r = inspect_directory(dir.path());
    ASSERT_EQ(r.problems.size(), 2u) << r.text;
    EXPECT_TRUE(has(r.problems[0], "config.json: mask_token_id=64")) << r.text;
    EXPECT_TRUE(has(r.problems[1],
                    "tensor 'fc.weight' has shape [16, 32] but the config implies "
                    "[16, 48]"))
        << r.text;
}

TEST(Inspect, MissingWeightsAndShards) {
    TempDir dir;
    const auto t = tiny_target();
    t.save(dir.path());
    auto r = inspect_directory(dir.path());
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(has(r.text, "no weights")) << r.text;
    EXPECT_TRUE(has(r.text, "from the config's layout")) << r.text;  // counts still shown

    write_weights(dir.path(), target_tensor_specs(t), DType::f32, 8192);
    const std::string shard = read_json_file(
        dir / kCheckpointIndexFile)["weight_map"]["model.layers.1.mlp.up_proj.weight"];
    fs::remove(dir / shard);
    r = inspect_directory(dir.path());
    EXPECT_FALSE(r.ok());
    EXPECT_TRUE(has(r.text, "missing: " + shard)) << r.text;

    EXPECT_FALSE(inspect_directory(dir / "nope").ok());
}

// The tiny target with `name` holding a NaN and an infinity.
void write_target_with_nonfinite(const fs::path& dir, const std::string& name) {
    const auto t = tiny_target();
    t.save(dir);
    Rng rng(3);
    std::vector<HostTensor> owned;
    std::vector<std::pair<std::string, Tensor>> named;
    for (const auto& s : target_tensor_specs(t)) {
        owned.push_back(test::random_tensor(Shape(s.shape), rng));
        if (s.name == name) {
            owned.back().f32()[1] = std::numeric_limits<float>::quiet_NaN();
            owned.back().f32()[2] = std::numeric_limits<float>::infinity();
        }
        named.emplace_back(s.name, owned.back());
    }
    write_checkpoint(dir, named, DType::bf16, size_t{1} << 20);
}

TEST(Inspect, NonFiniteWeightsAreReportedAndRefusedByTheLoader) {
    TempDir dir;
    write_target_with_nonfinite(dir.path(), "model.layers.2.mlp.down_proj.weight");
    const auto r = inspect_directory(dir.path());
    EXPECT_FALSE(r.ok());
    ASSERT_EQ(r.problems.size(), 1u) << r.text;
    EXPECT_TRUE(has(r.problems[0],
                    "tensor 'model.layers.2.mlp.down_proj.weight' is not finite: "
                    "2 of 512 values are NaN or infinite"))
        << r.text;
    EXPECT_TRUE(inspect_directory(dir.path(), {.check_values = false}).ok());
    const std::string e =
        test::error_of([&] { TargetModel::load(test::host_backend(), dir.path()); });
    EXPECT_TRUE(has(e, "tensor 'model.layers.2.mlp.down_proj.weight'")) << e;
    EXPECT_TRUE(has(e, "not finite")) << e;
}

TEST(Inspect, ConfigShapesOutsideTheirRangesAreRefusedBeforeAllocating) {
    TempDir dir;
    const auto t = tiny_target();
    t.save(dir.path());
    write_weights(dir.path(), target_tensor_specs(t), DType::bf16, size_t{1} << 20);
    auto j = t.to_json();
    const std::pair<const char*, int64_t> bad[] = {{"num_hidden_layers", 10000},
                                                   {"num_hidden_layers", 1000000000},
                                                   {"intermediate_size", int64_t{1} << 25}};
    for (const auto& [key, value] : bad) {
        auto k = j;
        k[key] = value;
        std::ofstream(dir / "config.json") << k.dump();
        const auto r = inspect_directory(dir.path());
        EXPECT_FALSE(r.ok()) << key;
        EXPECT_TRUE(has(r.text, fmt::format("{}={} is above", key, value))) << r.text;
        // The loader stops at the config: a bare std::bad_alloc would fail this test.
        const std::string e =
            test::error_of([&] { TargetModel::load(test::host_backend(), dir.path()); });
        EXPECT_TRUE(has(e, fmt::format("{}={} is above", key, value))) << e;
    }
    // Within the ranges but not what the weights hold: refused before the model is allocated.
    auto k = j;
    k["num_hidden_layers"] = 40;
    std::ofstream(dir / "config.json") << k.dump();
    const std::string e =
        test::error_of([&] { TargetModel::load(test::host_backend(), dir.path()); });
    EXPECT_TRUE(has(e, "do not match its config.json")) << e;
    EXPECT_TRUE(has(e, "'model.layers.4.input_layernorm.weight' [16] is missing")) << e;
    EXPECT_TRUE(has(e, "and 393 more")) << e;

    TempDir ddir;
    auto dj = tiny_drafter().to_json();
    dj["block_size"] = 1000;
    std::ofstream(ddir / "config.json") << dj.dump();
    const auto dr = inspect_directory(ddir.path());
    EXPECT_TRUE(has(dr.text, "block_size=1000 is outside [2, 256]")) << dr.text;
}

TEST(InspectCli, ExitStatusFollowsTheProblems) {
    TempDir dir;
    const auto d = tiny_drafter();
    d.save(dir.path());
    write_weights(dir.path(), drafter_tensor_specs(d), DType::bf16, size_t{1} << 20);
    auto res = test::run_dflash("inspect " + dir.path().string());
    EXPECT_EQ(res.exit_code, 0) << res.output;
    EXPECT_TRUE(has(res.output, "status:        OK")) << res.output;
    fs::remove(dir / "config.json");
    res = test::run_dflash("inspect " + dir.path().string());
    EXPECT_EQ(res.exit_code, 1) << res.output;
    EXPECT_TRUE(has(res.output, "no config.json")) << res.output;
    // A usage error is one `dflash: error:` line naming what is missing, like every other error.
    res = test::run_dflash("inspect");
    EXPECT_EQ(res.exit_code, 1) << res.output;
    EXPECT_TRUE(has(res.output, "dflash: error: inspect: DIR is required")) << res.output;
}

}  // namespace
}  // namespace dflash

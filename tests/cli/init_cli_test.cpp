// `dflash init` writes random targets (Qwen3 or Llama layout) and drafters of the requested size
// that load, pass `dflash inspect`, and pair with each other; non-empty outputs and drafters that
// read the target's last layer are refused.
#include "model/drafter.h"
#include "model/target.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

TEST(InitCli, TargetAndDrafterOfAnySize) {
    test::TempDir dir("init");
    const auto t = dir / "t", d = dir / "d";
    auto r = test::run_dflash("init target --output " + t.string() +
                              " --pretrain.hidden_size 48 --pretrain.num_layers 3"
                              " --pretrain.num_heads 3 --pretrain.num_kv_heads 1"
                              " --pretrain.head_dim 16 --pretrain.intermediate_size 72");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const TargetModel tm = TargetModel::load(test::host_backend(), t);
    EXPECT_EQ(tm.config().hidden_size, 48);
    EXPECT_EQ(tm.config().num_hidden_layers, 3);
    r = test::run_dflash("init drafter --target " + t.string() + " --output " + d.string() +
                         " --drafter.block_size 6 --drafter.num_layers 2 --dtype f32");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const DrafterModel dm = DrafterModel::load(test::host_backend(), d);
    EXPECT_EQ(dm.block_size(), 6);
    EXPECT_EQ(dm.config().layer.num_hidden_layers, 2);
    EXPECT_EQ(dm.config().num_target_layers, 3);
    EXPECT_EQ(test::run_dflash("inspect " + t.string()).exit_code, 0);
    EXPECT_EQ(test::run_dflash("inspect " + d.string()).exit_code, 0);
    r = test::run_dflash("init target --output " + t.string());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.output.find("not empty"), std::string::npos) << r.output;
}

TEST(InitCli, LlamaLayoutTarget) {
    test::TempDir dir("init_llama");
    const auto t = dir / "t", d = dir / "d";
    auto r = test::run_dflash("init target --output " + t.string() +
                              " --pretrain.architecture llama --pretrain.rope_scaling llama3"
                              " --pretrain.rope_theta 500000 --pretrain.tie_word_embeddings true"
                              " --pretrain.hidden_size 32 --pretrain.num_layers 4"
                              " --pretrain.num_heads 4 --pretrain.num_kv_heads 2"
                              " --pretrain.head_dim 8 --pretrain.intermediate_size 48");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const TargetModel tm = TargetModel::load(test::host_backend(), t);
    const TargetConfig& c = tm.config();
    EXPECT_EQ(c.model_type, "llama");
    EXPECT_FALSE(c.qk_norm);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_EQ(c.rope.theta, 500000.0);
    EXPECT_EQ(c.rope.scaling.type, RopeScalingType::llama3);
    EXPECT_EQ(c.rope.scaling.factor, 8.0);
    EXPECT_EQ(c.rope.scaling.original_max_position, 8192);
    r = test::run_dflash("inspect " + t.string());
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(test::has(r.output, "q_norm")) << r.output;
    r = test::run_dflash("init drafter --target " + t.string() + " --output " + d.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(DrafterModel::load(test::host_backend(), d).config().target_layer_ids,
              (std::vector<int64_t>{2}));
    r = test::run_dflash("init drafter --target " + t.string() + " --output " +
                         (dir / "d2").string() + " --drafter.target_layer_ids 1,3");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(test::has(r.output, "target_layer_ids[1]=3 is the target's last layer"))
        << r.output;
}

}  // namespace
}  // namespace dflash

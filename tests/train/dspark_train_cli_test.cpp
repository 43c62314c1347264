// DSpark through the binary (issue 26): a tiny pretrained target, a DFlash drafter trained for it,
// `dflash init drafter --from-drafter` turning it into a DSpark drafter (the warm start: every
// DFlash tensor kept), three training steps from it; the checkpoint is a DSpark drafter that
// `dflash inspect` accepts and names the dialect of, that decodes (`dflash generate --trace`), and
// that `init drafter` writes again in the speculators dialect. One command also starts a DSpark
// run (with the rnn Markov head).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/drafter.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "train/checkpoint.h"
#include "train/train_fixtures.h"

namespace dflash {
namespace {

const char* kTiny =
    " --runtime.threads 1 --pretrain.hidden_size 32 --pretrain.num_layers 5"
    " --pretrain.num_heads 4 --pretrain.num_kv_heads 2 --pretrain.head_dim 8"
    " --pretrain.intermediate_size 48 --pretrain.max_length 64 --pretrain.max_steps 3"
    " --train.max_length 64 --train.max_steps 3 --train.num_anchors 4 --drafter.block_size 4"
    " --train.log_every 1";

std::string pretrain_tiny_target(const test::TempDir& dir) {
    test::write_pattern_dataset(dir / "data", 12, 2);
    const auto pre = test::run_dflash("pretrain --data " + (dir / "data").string() + " --output " +
                                      (dir / "target").string() + kTiny);
    EXPECT_EQ(pre.exit_code, 0) << pre.output;
    return pre.exit_code == 0 ? (dir / "target" / train::checkpoint_name(3)).string() : "";
}

TEST(DsparkTrainCli, WarmStartTrainInspectDecodeExport) {
    test::TempDir dir("dspark-train-cli");
    const std::string target = pretrain_tiny_target(dir);
    ASSERT_FALSE(target.empty());
    const std::string data = (dir / "data").string();
    const auto v1 = test::run_dflash("train --target " + target + " --data " + data + " --output " +
                                     (dir / "dflash").string() + kTiny);
    ASSERT_EQ(v1.exit_code, 0) << v1.output;
    const std::string dflash = (dir / "dflash" / train::checkpoint_name(3)).string();
    const std::string init = (dir / "init").string();
    const auto in = test::run_dflash("init drafter --target " + target + " --output " + init +
                                     " --from-drafter " + dflash +
                                     " --dtype f32 --set drafter.architecture=dspark"
                                     " --drafter.markov_rank 6 --drafter.markov_head_type gated" +
                                     kTiny);
    ASSERT_EQ(in.exit_code, 0) << in.output;
    EXPECT_TRUE(test::has(in.output, "DSpark")) << in.output;
    const DrafterModel from = DrafterModel::load(test::host_backend(), dflash);
    const DrafterModel a = DrafterModel::load(test::host_backend(), init);
    ASSERT_TRUE(a.config().dspark());
    EXPECT_EQ(a.config().ds.markov_head, MarkovHeadType::gated);
    for (const auto& prm : from.params().params())  // bf16 on disk, both times: exact
        EXPECT_EQ(test::max_abs_diff(a.params().value(prm.name), prm.value), 0.0) << prm.name;

    const auto tr =
        test::run_dflash("train --target " + target + " --data " + data + " --init-drafter " +
                         init + " --output " + (dir / "drafter").string() + kTiny);
    ASSERT_EQ(tr.exit_code, 0) << tr.output;
    EXPECT_TRUE(test::has(tr.output, "dspark(0.1*ce+0.9*l1+1*bce)")) << tr.output;
    const std::string drafter = (dir / "drafter" / train::checkpoint_name(3)).string();
    const auto insp = test::run_dflash("inspect " + drafter);
    EXPECT_EQ(insp.exit_code, 0) << insp.output;
    EXPECT_TRUE(test::has(insp.output, "dialect deepspec")) << insp.output;
    EXPECT_TRUE(test::has(insp.output, "markov head gated, rank 6")) << insp.output;
    const DrafterModel b = DrafterModel::load(test::host_backend(), drafter);
    const std::string w2 = "markov_head.markov_w2.weight";
    EXPECT_GT(test::max_abs_diff(a.params().value(w2), b.params().value(w2)), 0.0)
        << "training did not move the Markov head";

    const auto gen = test::run_dflash("generate --target " + target + " --drafter " + drafter +
                                      " --prompt 'pq ab' --infer.max_new_tokens 12 --trace" +
                                      " --runtime.threads 1");
    EXPECT_EQ(gen.exit_code, 0) << gen.output;
    EXPECT_TRUE(test::has(gen.output, "trace step 0: drafted [")) << gen.output;

    // Written again in the speculators dialect: the same tensors, read back the same.
    const std::string sp = (dir / "speculators").string();
    const auto ex = test::run_dflash(
        "init drafter --target " + target + " --output " + sp + " --from-drafter " + drafter +
        " --dtype f32 --set drafter.architecture=dspark --set drafter.dialect=speculators" + kTiny);
    ASSERT_EQ(ex.exit_code, 0) << ex.output;
    const auto insp2 = test::run_dflash("inspect " + sp);
    EXPECT_EQ(insp2.exit_code, 0) << insp2.output;
    EXPECT_TRUE(test::has(insp2.output, "dialect speculators")) << insp2.output;
    EXPECT_TRUE(test::has(test::read_file(std::filesystem::path(sp) / "config.json"),
                          "\"speculators_model_type\": \"dspark\""));
    const DrafterModel c = DrafterModel::load(test::host_backend(), sp);
    for (const auto& prm : b.params().params())
        EXPECT_EQ(test::max_abs_diff(c.params().value(prm.name), prm.value), 0.0) << prm.name;
}

TEST(DsparkTrainCli, CheckpointsKeepTheChosenDialect) {
    // Checkpoints are written from the writer's copy of the weights (WorkerTask::snapshot_model):
    // their config.json must be in drafter.dialect like save_model's, not the default one.
    test::TempDir dir("dspark-train-dialect");
    const std::string target = pretrain_tiny_target(dir);
    ASSERT_FALSE(target.empty());
    const auto tr =
        test::run_dflash("train --target " + target + " --data " + (dir / "data").string() +
                         " --output " + (dir / "drafter").string() +
                         " --drafter.architecture dspark --drafter.markov_rank 4"
                         " --drafter.dialect speculators" +
                         kTiny);
    ASSERT_EQ(tr.exit_code, 0) << tr.output;
    const std::filesystem::path ck = dir / "drafter" / train::checkpoint_name(3);
    EXPECT_TRUE(
        test::has(test::read_file(ck / "config.json"), "\"speculators_model_type\": \"dspark\""));
    EXPECT_TRUE(DrafterModel::load(test::host_backend(), ck).config().dspark());
}

TEST(DsparkTrainCli, OneCommandStartsADsparkRun) {
    test::TempDir dir("dspark-train-one");
    const std::string target = pretrain_tiny_target(dir);
    ASSERT_FALSE(target.empty());
    const auto tr =
        test::run_dflash("train --target " + target + " --data " + (dir / "data").string() +
                         " --output " + (dir / "drafter").string() +
                         " --drafter.architecture dspark --drafter.markov_rank 4"
                         " --drafter.markov_head_type rnn --train.dspark_ce_alpha 0.5" +
                         kTiny);
    ASSERT_EQ(tr.exit_code, 0) << tr.output;
    EXPECT_TRUE(test::has(tr.output, "dspark(0.5*ce+0.9*l1+1*bce)")) << tr.output;
    const DrafterModel d = DrafterModel::load(
        test::host_backend(), (dir / "drafter" / train::checkpoint_name(3)).string());
    EXPECT_TRUE(d.config().dspark());
    EXPECT_EQ(d.config().ds.markov_rank, 4);
    EXPECT_EQ(d.config().ds.markov_head, MarkovHeadType::rnn);
    // Trained: the rnn head's J moved from its initial draw (its bias from 0).
    double bias = 0;
    const Tensor jb = d.params().value("markov_head.joint_proj.bias");
    for (int64_t i = 0; i < jb.numel(); ++i) bias = std::max(bias, std::fabs(double{jb.f32()[i]}));
    EXPECT_GT(bias, 0.0);
}

}  // namespace
}  // namespace dflash

// `dflash train` with a DFlash2 drafter through the binary: a tiny pretrained target, a DFlash2
// drafter from `dflash init drafter --set drafter.architecture=dflash2`, three training steps from
// it (--init-drafter); the checkpoint is a DFlash2 drafter that `dflash inspect` accepts, whose
// convolutions moved away from the identity, and that decodes (`dflash generate --trace`).
#include <gtest/gtest.h>

#include "model/drafter.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "train/checkpoint.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

const char* kTiny =
    " --runtime.threads 1 --pretrain.hidden_size 32 --pretrain.num_layers 5"
    " --pretrain.num_heads 4 --pretrain.num_kv_heads 2 --pretrain.head_dim 8"
    " --pretrain.intermediate_size 48 --pretrain.max_length 64 --pretrain.max_steps 3"
    " --train.max_length 64 --train.max_steps 3 --train.num_anchors 4 --drafter.block_size 4"
    " --train.log_every 1";

// A pattern dataset in dir/data and a tiny target pretrained on it for 3 steps; returns the
// target's checkpoint directory ("" after a failed pretraining, which the caller asserts on).
std::string pretrain_tiny_target(const test::TempDir& dir) {
    test::write_pattern_dataset(dir / "data", 12, 2);
    const auto pre = test::run_dflash("pretrain --data " + (dir / "data").string() + " --output " +
                                      (dir / "target").string() + kTiny);
    EXPECT_EQ(pre.exit_code, 0) << pre.output;
    return pre.exit_code == 0 ? (dir / "target" / train::checkpoint_name(3)).string() : "";
}

TEST(Dflash2TrainCli, InitTrainInspectDecode) {
    test::TempDir dir("dflash2-train-cli");
    const std::string target = pretrain_tiny_target(dir);
    ASSERT_FALSE(target.empty());
    const std::string data = (dir / "data").string();
    const std::string init = (dir / "init").string();
    const auto in = test::run_dflash("init drafter --target " + target + " --output " + init +
                                     " --dtype f32 --set drafter.architecture=dflash2"
                                     " --drafter.selector_rank 8 --drafter.selector_top_k 4" +
                                     kTiny);
    ASSERT_EQ(in.exit_code, 0) << in.output;
    const auto tr =
        test::run_dflash("train --target " + target + " --data " + data + " --init-drafter " +
                         init + " --output " + (dir / "drafter").string() + kTiny);
    ASSERT_EQ(tr.exit_code, 0) << tr.output;
    const std::string drafter = (dir / "drafter" / train::checkpoint_name(3)).string();
    const auto insp = test::run_dflash("inspect " + drafter);
    EXPECT_EQ(insp.exit_code, 0) << insp.output;
    EXPECT_TRUE(test::has(insp.output, "DFlash2DraftModel")) << insp.output;

    const DrafterModel a = DrafterModel::load(test::host_backend(), init);
    const DrafterModel b = DrafterModel::load(test::host_backend(), drafter);
    ASSERT_TRUE(b.config().dflash2());
    const std::string conv = "layers.0.mlp_conv.kernel_projection.weight";
    EXPECT_GT(test::max_abs_diff(a.params().value(conv), b.params().value(conv)), 0.0)
        << "training did not move the convolution";
    // The selector's loss (train.selector_loss_alpha = 1 by default) moves the selector away from
    // its neutral start, and its metrics are in every training record.
    const std::string succ = "candidate_selector.successor_codebook";
    EXPECT_EQ(
        test::max_abs_diff(a.params().value(succ), HostTensor(a.params().value(succ).shape())),
        0.0);
    EXPECT_GT(test::max_abs_diff(a.params().value(succ), b.params().value(succ)), 0.0)
        << "training did not move the selector";
    const std::string metrics = test::read_file(dir / "drafter" / "metrics.jsonl");
    for (const char* key : {"\"selector_loss\"", "\"candidate_recall_at_k\"", "\"path_accept_len\"",
                            "\"oracle_accept_len\"", "\"teacher_forced_selector_acc\""})
        EXPECT_TRUE(test::has(metrics, key)) << key << " missing from " << metrics;
    EXPECT_TRUE(test::has(tr.output, "recall@4")) << tr.output;

    const auto gen = test::run_dflash("generate --target " + target + " --drafter " + drafter +
                                      " --prompt 'pq ab' --infer.max_new_tokens 12 --trace" +
                                      " --runtime.threads 1");
    EXPECT_EQ(gen.exit_code, 0) << gen.output;
    EXPECT_TRUE(test::has(gen.output, "trace step 0: drafted [")) << gen.output;
}

// One command starts a DFlash2 run (issue 23): `dflash train --drafter.architecture dflash2` makes
// the random DFlash2 drafter `dflash init drafter` would make and trains it; before, it was refused
// and needed `init drafter` + `--init-drafter`.
TEST(Dflash2TrainCli, OneCommandStartsADflash2Run) {
    test::TempDir dir("dflash2-train-one");
    const std::string target = pretrain_tiny_target(dir);
    ASSERT_FALSE(target.empty());
    const std::string data = (dir / "data").string();
    const auto tr = test::run_dflash("train --target " + target + " --data " + data + " --output " +
                                     (dir / "drafter").string() +
                                     " --drafter.architecture dflash2 --drafter.selector_rank 8"
                                     " --drafter.selector_top_k 4" +
                                     kTiny);
    ASSERT_EQ(tr.exit_code, 0) << tr.output;
    EXPECT_TRUE(test::has(tr.output, "DFlash2 selector, top-4")) << tr.output;
    const DrafterModel d = DrafterModel::load(
        test::host_backend(), (dir / "drafter" / train::checkpoint_name(3)).string());
    EXPECT_TRUE(d.config().dflash2());
    EXPECT_EQ(d.config().d2.selector_top_k, 4);
}

}  // namespace
}  // namespace dflash

// `dflash pretrain` and `dflash train` end to end through the binary: help, a tiny pretraining
// run, a drafter trained on its output (evaluated on held-out data and by decoding prompts) that
// `dflash inspect` accepts, and a clear error for a missing argument.
#include <gtest/gtest.h>

#include <fstream>

#include "support/test_util.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

const char* kTiny =
    " --runtime.threads 1 --pretrain.hidden_size 32 --pretrain.num_layers 5"
    " --pretrain.num_heads 4 --pretrain.num_kv_heads 2 --pretrain.head_dim 8"
    " --pretrain.intermediate_size 48 --pretrain.max_length 64 --pretrain.max_steps 3"
    " --train.max_length 64 --train.max_steps 3 --train.num_anchors 4 --drafter.block_size 4"
    " --train.log_every 1";

TEST(TrainCli, HelpNamesTheArguments) {
    const auto train = test::run_dflash("train --help");
    EXPECT_EQ(train.exit_code, 0) << train.output;
    for (const char* a : {"--target", "--data", "--eval-data", "--eval-prompts", "--output",
                          "--resume", "--init-drafter"})
        EXPECT_NE(train.output.find(a), std::string::npos) << a << "\n" << train.output;
    const auto pre = test::run_dflash("pretrain --help");
    EXPECT_EQ(pre.exit_code, 0) << pre.output;
    EXPECT_NE(pre.output.find("--data"), std::string::npos) << pre.output;
}

TEST(TrainCli, PretrainThenTrainThenInspect) {
    test::TempDir dir("dflash-train-cli");
    test::write_pattern_dataset(dir / "data", 12, 2);
    const std::string data = (dir / "data").string();
    const auto pre = test::run_dflash("pretrain --data " + data + " --output " +
                                      (dir / "target").string() + kTiny);
    ASSERT_EQ(pre.exit_code, 0) << pre.output;
    const std::string target = (dir / "target" / train::checkpoint_name(3)).string();
    EXPECT_NE(pre.output.find("target:   " + target), std::string::npos) << pre.output;
    EXPECT_NE(pre.output.find("next:     dflash train"), std::string::npos) << pre.output;

    std::ofstream(dir / "prompts.jsonl") << "{\"prompt\": \"pq abcde\"}\n";
    const auto tr =
        test::run_dflash("train --target " + target + " --data " + data + " --eval-data " + data +
                         " --eval-prompts " + (dir / "prompts.jsonl").string() + " --output " +
                         (dir / "drafter").string() + kTiny);
    ASSERT_EQ(tr.exit_code, 0) << tr.output;
    const std::string drafter = (dir / "drafter" / train::checkpoint_name(3)).string();
    EXPECT_NE(tr.output.find("drafter:  " + drafter), std::string::npos) << tr.output;
    EXPECT_NE(tr.output.find("held-out: loss"), std::string::npos) << tr.output;
    EXPECT_NE(tr.output.find("decoding: tau"), std::string::npos) << tr.output;
    EXPECT_NE(tr.output.find("decode tau"), std::string::npos) << tr.output;  // the log line
    const auto insp = test::run_dflash("inspect " + drafter);
    EXPECT_EQ(insp.exit_code, 0) << insp.output;

    const auto missing = test::run_dflash("train --data " + data);
    EXPECT_NE(missing.exit_code, 0);
    EXPECT_NE(missing.output.find("--target"), std::string::npos) << missing.output;
}

}  // namespace
}  // namespace dflash

// `dflash pretrain` and `dflash train` end to end through the binary: help, a tiny pretraining
// run, a drafter trained on its output (evaluated on held-out data and by decoding prompts) that
// `dflash inspect` accepts, and a clear error for a missing argument. Then, with a run in flight:
// a second writer into its directory is refused naming its pid; Ctrl-C checkpoints and exits 130;
// the printed `next:` command, run as printed, continues the same run; SIGTERM exits 143.
#include <gtest/gtest.h>

#include <signal.h>

#include <fstream>
#include <regex>
#include <sstream>

#include "support/test_util.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

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

// The words of the `next:` command a stopped run printed (paths here hold no spaces or quotes).
std::vector<std::string> next_command(const std::string& output) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(output, m, std::regex(R"(next:     dflash (.*)\n)"))) << output;
    std::vector<std::string> words;
    std::istringstream in(m.size() > 1 ? m[1].str() : "");
    for (std::string w; in >> w;) words.push_back(w);
    return words;
}

TEST(TrainCli, SignalsCheckpointExitAsTheShellExpectsAndNextContinuesTheRun) {
    test::TempDir dir("dflash-train-signal");
    test::write_pattern_dataset(dir / "data", 12, 2);
    test::write_tiny_target(dir / "target");
    const std::string run = (dir / "run").string();
    // Settings that differ from the defaults: a resume that forgot them would train another run.
    const std::vector<std::string> args = {"train",
                                           "--target",
                                           (dir / "target").string(),
                                           "--data",
                                           (dir / "data").string(),
                                           "--output",
                                           run,
                                           "--runtime.threads",
                                           "1",
                                           "--train.max_length",
                                           "48",
                                           "--train.max_steps",
                                           "100000",
                                           "--train.num_anchors",
                                           "4",
                                           "--drafter.block_size",
                                           "4",
                                           "--train.log_every",
                                           "1",
                                           "--train.checkpoint_every",
                                           "0",
                                           "--train.eval_every",
                                           "0"};
    test::DflashProcess first(args);
    ASSERT_TRUE(first.wait_for_output("step 2/100000")) << first.output();

    // A second run into the same directory while the first is writing there.
    const auto second =
        test::run_dflash("train --target " + (dir / "target").string() + " --data " +
                         (dir / "data").string() + " --output " + run + " --runtime.threads 1");
    EXPECT_EQ(second.exit_code, 1) << second.output;
    EXPECT_TRUE(test::has(second.output, "is in use by pid " + std::to_string(first.pid())))
        << second.output;

    first.send_signal(SIGINT);
    const auto stopped = first.finish();
    EXPECT_EQ(stopped.exit_code, 130) << stopped.output;
    std::smatch m;
    ASSERT_TRUE(
        std::regex_search(stopped.output, m, std::regex(R"(stopped after step (\d+)/100000)")))
        << stopped.output;
    const int64_t step = std::stoll(m[1]);
    EXPECT_TRUE(fs::is_directory(fs::path(run) / train::checkpoint_name(step))) << stopped.output;

    // The printed command, as printed: the checkpoint supplies max_steps, max_length, block size.
    const std::vector<std::string> next = next_command(stopped.output);
    ASSERT_FALSE(next.empty());
    EXPECT_EQ(next.back(), run);
    test::DflashProcess again(next);
    const std::string want = fmt::format("step {}/100000", step + 1);
    ASSERT_TRUE(again.wait_for_output(want)) << again.output();
    again.send_signal(SIGTERM);
    const auto terminated = again.finish();
    EXPECT_EQ(terminated.exit_code, 143) << terminated.output;
    EXPECT_FALSE(test::has(terminated.output, "overrides the checkpoint")) << terminated.output;
    EXPECT_TRUE(test::has(test::read_file(fs::path(run) / "settings.toml"), "max_length = 48"));
    EXPECT_TRUE(test::has(terminated.output, "next:     dflash train")) << terminated.output;
}

}  // namespace
}  // namespace dflash

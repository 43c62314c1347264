// `dflash train` over several processes on localhost (docs/training.md "Several processes (one per
// node)"; comm/launch.h): two processes of one worker each, one started with torchrun's variables
// and one with --launch.* settings, train exactly the run of one process with two workers (every
// loss, gradient norm and the checkpoint's weights, bit for bit). A checkpoint of 2 workers resumes
// with 1 worker at the same data position (the losses match to float rounding), and a worker count
// that cannot continue it exactly is refused. A process killed mid-run makes the other fail naming
// it, not hang, and its last checkpoint resumes in one process.
#include <gtest/gtest.h>

#include <signal.h>

#include <fstream>

#include <nlohmann/json.hpp>
#include "comm/tcp_group.h"

#include "support/test_util.h"
#include "train/checkpoint.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

struct StepRow {
    int64_t step;
    double loss;
    double grad_norm;
};

std::vector<StepRow> training_rows(const fs::path& metrics) {
    std::vector<StepRow> rows;
    std::ifstream in(metrics);
    for (std::string line; std::getline(in, line);) {
        const auto j = nlohmann::json::parse(line);
        if (j.value("eval", false)) continue;
        rows.push_back({j.at("step").get<int64_t>(), j.at("loss").get<double>(),
                        j.at("grad_norm").get<double>()});
    }
    return rows;
}

int free_port() {
    const TcpListener l("127.0.0.1", 0);
    return l.port();
}

class MultiProcess : public ::testing::Test {
  protected:
    void SetUp() override {
        test::write_pattern_dataset(dir_ / "data", 16, 3);
        test::write_tiny_target(dir_ / "target");
    }
    std::vector<std::string> args(const std::string& out, int64_t steps = 4) const {
        return {"train",
                "--target",
                (dir_ / "target").string(),
                "--data",
                (dir_ / "data").string(),
                "--output",
                (dir_ / out).string(),
                "--runtime.backend",
                "cpu",
                "--runtime.threads",
                "1",
                "--train.max_length",
                "48",
                "--train.max_steps",
                std::to_string(steps),
                "--train.num_anchors",
                "4",
                "--drafter.block_size",
                "4",
                "--train.log_every",
                "1",
                "--train.checkpoint_every",
                "2",
                "--train.eval_every",
                "0"};
    }
    static std::string words(const std::vector<std::string>& a) {
        std::string s;
        for (const auto& w : a) s += w + " ";
        return s;
    }
    test::TempDir dir_{"dflash-multiprocess"};
};

TEST_F(MultiProcess, TwoProcessesTrainTheRunOfOneProcessWithTwoWorkersBitForBit) {
    const auto one = test::run_dflash(words(args("one")) + "--runtime.devices 2");
    ASSERT_EQ(one.exit_code, 0) << one.output;

    const int port = free_port();
    auto second = args("two");
    for (const char* kv :
         {"--launch.rank", "1", "--launch.world_size", "2", "--launch.master_port"})
        second.push_back(kv);
    second.push_back(std::to_string(port));
    test::DflashProcess p1(second);
    const auto p0 = test::run_dflash(
        words(args("two")),
        "RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port));
    const auto r1 = p1.finish();
    ASSERT_EQ(p0.exit_code, 0) << p0.output;
    ASSERT_EQ(r1.exit_code, 0) << r1.output;
    EXPECT_TRUE(test::has(p0.output, "process 0 of 2 (env:RANK)")) << p0.output;
    EXPECT_TRUE(test::has(p0.output, "over 2 processes x 1 cpu worker(s) = 2 workers"))
        << p0.output;
    EXPECT_TRUE(test::has(r1.output, "process 1 of 2: trained after step 4/4")) << r1.output;

    const auto a = training_rows(dir_ / "one" / "metrics.jsonl");
    const auto b = training_rows(dir_ / "two" / "metrics.jsonl");
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(b.size(), a.size());
    for (size_t i = 0; i < a.size(); ++i) {
        EXPECT_EQ(b[i].step, a[i].step);
        EXPECT_EQ(b[i].loss, a[i].loss) << "step " << a[i].step;
        EXPECT_EQ(b[i].grad_norm, a[i].grad_norm) << "step " << a[i].step;
    }
    EXPECT_NE(a.front().loss, a.back().loss);  // it trained
    const std::string ckpt = train::checkpoint_name(4);
    EXPECT_EQ(test::read_file(dir_ / "one" / ckpt / "model.safetensors"),
              test::read_file(dir_ / "two" / ckpt / "model.safetensors"));
}

TEST_F(MultiProcess, ACheckpointOfTwoWorkersResumesWithOneAtTheSameDataPosition) {
    const auto two = test::run_dflash(words(args("two")) + "--runtime.devices 2");
    ASSERT_EQ(two.exit_code, 0) << two.output;
    const std::string ckpt2 = (dir_ / "two" / train::checkpoint_name(2)).string();
    // One worker reading two sequences a step reads what the two workers read, in one order.
    const auto one =
        test::run_dflash("train --target " + (dir_ / "target").string() + " --data " +
                         (dir_ / "data").string() + " --resume " + ckpt2 + " --output " +
                         (dir_ / "one").string() + " --runtime.devices 1 --train.batch_size 2");
    ASSERT_EQ(one.exit_code, 0) << one.output;
    EXPECT_TRUE(test::has(one.output, "1 workers continue the data position of the checkpoint's 2"))
        << one.output;
    const auto a = training_rows(dir_ / "two" / "metrics.jsonl");
    const auto b = training_rows(dir_ / "one" / "metrics.jsonl");
    ASSERT_EQ(a.size(), 4u);
    ASSERT_EQ(b.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        EXPECT_EQ(b[i].step, a[i + 2].step);
        EXPECT_NEAR(b[i].loss, a[i + 2].loss, 1e-5 * std::abs(a[i + 2].loss)) << b[i].step;
        EXPECT_NEAR(b[i].grad_norm, a[i + 2].grad_norm, 1e-4 * a[i + 2].grad_norm) << b[i].step;
    }
    // Three workers cannot continue 2 x 2 sequences exactly.
    const auto three = test::run_dflash(
        "train --target " + (dir_ / "target").string() + " --data " + (dir_ / "data").string() +
        " --resume " + ckpt2 + " --output " + (dir_ / "three").string() + " --runtime.devices 3");
    EXPECT_EQ(three.exit_code, 1) << three.output;
    EXPECT_TRUE(test::has(three.output, "had read 4 sequences of epoch 0, which 3 workers"))
        << three.output;
}

TEST_F(MultiProcess, AKilledProcessStopsTheOtherNamingItAndTheLastCheckpointResumes) {
    const int port = free_port();
    auto common = args("run", 100000);
    for (const char* kv :
         {"--launch.world_size", "2", "--launch.timeout_s", "60", "--launch.master_port"})
        common.push_back(kv);
    common.push_back(std::to_string(port));
    auto a0 = common, a1 = common;
    a0.insert(a0.end(), {"--launch.rank", "0"});
    a1.insert(a1.end(), {"--launch.rank", "1"});
    test::DflashProcess p0(a0);
    test::DflashProcess p1(a1);
    ASSERT_TRUE(p0.wait_for_output("step 5/100000")) << p0.output();
    p1.send_signal(SIGKILL);
    const auto t0 = std::chrono::steady_clock::now();
    const auto r0 = p0.finish();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
    EXPECT_EQ(r0.exit_code, 1) << r0.output;
    EXPECT_TRUE(test::has(r0.output, "lost its connection to process 1")) << r0.output;
    const fs::path latest = dir_ / "run" / train::checkpoint_name(4);
    ASSERT_TRUE(fs::is_directory(latest)) << r0.output;
    const auto resumed = test::run_dflash(
        "train --target " + (dir_ / "target").string() + " --data " + (dir_ / "data").string() +
        " --resume " + latest.string() + " --train.max_steps 6 --runtime.devices 2");
    EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_TRUE(test::has(resumed.output, "trained after step 6/6")) << resumed.output;
}

}  // namespace
}  // namespace dflash

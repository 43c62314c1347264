// Drafter training (src/train/trainer.h, drafter_training.h): N workers equal one worker with an
// N times larger batch, the loss falls on a learnable dataset, and a worker that fails inside a
// step is reported with its worker id and step.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

using TrainRun = test::RecordedRun;

class DrafterTraining : public test::SharedInputsTest<DrafterTraining> {
  public:
    static constexpr const char* kTag = "dflash-train";
    static void write_inputs(const std::filesystem::path& dir) {
        test::write_pattern_dataset(dir / "data", 24, 1);
        test::write_tiny_target(dir / "target");
    }

  protected:
    static TrainRun train(const std::string& out,
                          std::vector<std::pair<std::string, std::string>> kv) {
        return test::train_recorded(dir_->path(), out, kv);
    }
};

// Gradient sums are taken in another order, so agreement is to float rounding: 1e-5 relative on
// the losses and gradient norms of every step, and, per tensor, on every fp32 master weight and
// both AdamW moments after 6 steps. Runs compared this way have clipping off (unclipped()):
// AdamW's update is nearly blind to a uniform scale of the gradients, and clipping would hide it
// in the norm too, while adam_m, adam_v and the norm show it.
void expect_equivalent(const TrainRun& a, const TrainRun& b) {
    ASSERT_EQ(a.losses.size(), 6u);
    ASSERT_EQ(a.losses.size(), b.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i) {
        EXPECT_NEAR(a.losses[i], b.losses[i], 1e-5 * std::abs(b.losses[i])) << "step " << i + 1;
        EXPECT_NEAR(a.grad_norms[i], b.grad_norms[i], 1e-5 * std::abs(b.grad_norms[i]))
            << "step " << i + 1;
    }
    const auto sa = test::read_state_tensors(a.summary.model_dir);
    const auto sb = test::read_state_tensors(b.summary.model_dir);
    EXPECT_LT(test::max_state_rel_diff(sa, sb, "master."), 1e-5);
    EXPECT_LT(test::max_state_rel_diff(sa, sb, "adam_m."), 1e-5);
    EXPECT_LT(test::max_state_rel_diff(sa, sb, "adam_v."), 1e-5);
}

std::vector<std::pair<std::string, std::string>> unclipped(
    std::vector<std::pair<std::string, std::string>> kv) {
    kv.emplace_back("train.grad_clip", "0");
    return kv;
}

TEST_F(DrafterTraining, TwoWorkersEqualOneWorkerWithTwiceTheBatch) {
    const TrainRun one = train("one-b2", unclipped({{"train.batch_size", "2"}}));
    const TrainRun two = train("two-b1", unclipped({{"runtime.devices", "2"}}));
    expect_equivalent(two, one);
}

TEST_F(DrafterTraining, ThreeWorkersEqualOneWorkerWithThreeTimesTheBatch) {
    const TrainRun one = train("one-b3", unclipped({{"train.batch_size", "3"}}));
    const TrainRun three = train("three-b1", unclipped({{"runtime.devices", "3"}}));
    expect_equivalent(three, one);
}

TEST_F(DrafterTraining, AccumulationEqualsBatch) {
    const TrainRun batch = train("acc-b2", unclipped({{"train.batch_size", "2"}}));
    const TrainRun acc = train("acc-a2", unclipped({{"train.accumulation", "2"}}));
    expect_equivalent(acc, batch);
}

TEST_F(DrafterTraining, LossFallsOnALearnableDataset) {
    const TrainRun r = train("learn", {{"train.max_steps", "150"},
                                       {"train.lr", "1e-2"},
                                       {"train.batch_size", "2"},
                                       {"train.warmup_ratio", "0.05"}});
    ASSERT_EQ(r.losses.size(), 150u);
    const double first = (r.losses[0] + r.losses[1]) / 2;
    const double last = (r.losses[148] + r.losses[149]) / 2;
    // From ~ln(V) = 5.6 to well under the 1.6 of guessing among the 5 response letters.
    EXPECT_LT(last, 0.25 * first) << "first " << first << " last " << last;
    EXPECT_LT(last, 1.0);
    EXPECT_DOUBLE_EQ(r.summary.final_loss, r.losses.back());
    ASSERT_EQ(r.summary.acc.size(), 3u);               // block positions 1..3
    for (double a : r.summary.acc) EXPECT_GT(a, 0.9);  // the pattern is fully predictable
    EXPECT_GT(r.summary.tau_implied, 3.5);             // of at most B = 4
}

TEST_F(DrafterTraining, DeviceIdsNameOneDevicePerWorker) {
    const TrainRun listed =
        train("ids", unclipped({{"runtime.devices", "2"}, {"runtime.device_ids", "1,0"}}));
    const TrainRun counted = train("ids-count", unclipped({{"runtime.devices", "2"}}));
    EXPECT_EQ(listed.losses, counted.losses);  // the CPU backend: the same run
    for (const auto& [ids, what] : std::vector<std::pair<std::string, std::string>>{
             {"0", "runtime.devices is 2"}, {"1,1", "twice"}}) {
        try {
            train("ids-bad", {{"runtime.devices", "2"}, {"runtime.device_ids", ids}});
            ADD_FAILURE() << ids << ": no error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
        }
    }
}

TEST_F(DrafterTraining, WorkerFailureNamesWorkerAndStep) {
    train::DrafterTrainJob job;
    job.target_dir = *dir_ / "target";
    job.data_dir = *dir_ / "data";
    job.output_dir = *dir_ / "fail";
    job.hooks.handle_signals = false;
    job.hooks.progress = false;
    job.hooks.on_step_begin = [](int worker, int64_t step) {
        if (worker == 1 && step == 3) throw Error("injected fault");
    };
    try {
        train_drafter_from_settings(job, test::drafter_settings({{"runtime.devices", "2"}}),
                                    Logger());
        FAIL() << "the run should fail";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("worker 1"), std::string::npos) << msg;
        EXPECT_NE(msg.find("step 3"), std::string::npos) << msg;
        EXPECT_NE(msg.find("injected fault"), std::string::npos) << msg;
    }
}

}  // namespace
}  // namespace dflash

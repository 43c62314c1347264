// Ctrl-C during training (src/train/signal_watcher.h): a SIGINT sent to the process mid-run makes
// every worker stop at the same step boundary, worker 0 writes a checkpoint there, and the run
// resumes from it. Its own executable, so that no earlier test left threads that would take the
// signal.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

TEST(SignalStop, SigintCheckpointsAtAStepBoundaryAndResumes) {
    test::TempDir dir("dflash-signal");
    test::write_pattern_dataset(dir / "data", 24, 9);
    test::write_tiny_target(dir / "target");
    train::DrafterTrainJob job = test::drafter_job(dir.path(), "run");
    job.hooks.handle_signals = true;  // the behaviour under test
    job.hooks.on_record = [](const train::StepRecord& r) {
        if (r.step != 2) return;
        kill(getpid(), SIGINT);  // process-directed, like Ctrl-C
        // Let the watcher see it before the next step's stop vote.
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
    };
    const auto s = test::drafter_settings({{"runtime.devices", "2"}, {"train.max_steps", "20"}});
    const train::TrainSummary stopped = train::run_drafter_training(job, s, Logger());
    EXPECT_TRUE(stopped.interrupted);
    EXPECT_EQ(stopped.steps, 3);
    EXPECT_EQ(stopped.model_dir, dir / "run" / train::checkpoint_name(3));
    EXPECT_EQ(train::read_training_state(stopped.model_dir).step, 3);

    job.hooks.on_record = nullptr;
    job.resume = dir / "run";
    job.output_dir.clear();  // continues in the checkpoint's run directory
    const train::TrainSummary done = train::run_drafter_training(job, s, Logger());
    EXPECT_FALSE(done.interrupted);
    EXPECT_EQ(done.first_step, 4);
    EXPECT_EQ(done.steps, 20);
    EXPECT_EQ(done.model_dir, dir / "run" / train::checkpoint_name(20));
}

}  // namespace
}  // namespace dflash

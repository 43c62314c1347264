// Ctrl-C during training (src/train/signal_watcher.h): a SIGINT sent to the process mid-run makes
// every worker stop at the same step boundary, worker 0 writes a checkpoint there, and the run
// resumes from it; a stop requested before the workers start (Ctrl-C during start-up) is not lost.
// Its own executable, so that no earlier test left threads that would take the signal.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "core/worker_pool.h"
#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

// A drafter job on a fresh dataset and target in `dir`, writing to dir/run; its stop requests
// land on `stop`.
train::DrafterTrainJob signal_job(const test::TempDir& dir, StopSource& stop) {
    test::write_pattern_dataset(dir / "data", 24, 9);
    test::write_tiny_target(dir / "target");
    train::DrafterTrainJob job = test::drafter_job(dir.path(), "run");
    job.hooks.stop = &stop;
    return job;
}

config::Settings two_workers_20_steps() {
    return test::drafter_settings({{"runtime.devices", "2"}, {"train.max_steps", "20"}});
}

TEST(SignalStop, SigintCheckpointsAtAStepBoundaryAndResumes) {
    test::TempDir dir("dflash-signal");
    StopSource stop;
    train::DrafterTrainJob job = signal_job(dir, stop);
    // The behaviour under test: run_trainer arms the watcher, which requests the stop on `stop`,
    // where the test sees it.
    job.hooks.handle_signals = true;
    job.hooks.on_record = [&stop](const train::StepRecord& r) {
        if (r.step != 2) return;
        kill(getpid(), SIGINT);  // process-directed, like Ctrl-C
        // The watcher thread takes it: wait until it has asked for the stop, so that step 3's
        // stop vote sees it (a deadline against a hang, not a guess at how long that takes).
        const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
        while (!stop.requested() && std::chrono::steady_clock::now() < deadline)
            std::this_thread::yield();
        ASSERT_TRUE(stop.requested()) << "the SIGINT never reached the watcher";
        EXPECT_EQ(stop.signal(), SIGINT);
    };
    const config::Settings s = two_workers_20_steps();
    const train::TrainSummary stopped = train_drafter_from_settings(job, s, Logger());
    EXPECT_TRUE(stopped.interrupted);
    EXPECT_EQ(stopped.stop_signal, SIGINT);
    EXPECT_EQ(stopped.steps, 3);
    EXPECT_EQ(stopped.model_dir, dir / "run" / train::checkpoint_name(3));
    EXPECT_EQ(train::read_training_state(stopped.model_dir).step, 3);

    job.hooks.on_record = nullptr;
    job.hooks.stop = nullptr;
    job.resume = dir / "run";
    job.output_dir.clear();  // continues in the checkpoint's run directory
    const train::TrainSummary done = train_drafter_from_settings(job, s, Logger());
    EXPECT_FALSE(done.interrupted);
    EXPECT_EQ(done.first_step, 4);
    EXPECT_EQ(done.steps, 20);
    EXPECT_EQ(done.model_dir, dir / "run" / train::checkpoint_name(20));
}

TEST(SignalStop, AStopRequestedBeforeTheWorkersStartIsNotLost) {
    test::TempDir dir("dflash-signal-early");
    StopSource stop;
    const train::DrafterTrainJob job = signal_job(dir, stop);
    stop.request(SIGTERM);  // as a Ctrl-C while the target was still loading
    const train::TrainSummary r =
        train_drafter_from_settings(job, two_workers_20_steps(), Logger());
    EXPECT_TRUE(r.interrupted);
    EXPECT_EQ(r.stop_signal, SIGTERM);
    EXPECT_EQ(r.steps, 1);  // the first step boundary
    EXPECT_EQ(train::read_training_state(r.model_dir).step, 1);
}

}  // namespace
}  // namespace dflash

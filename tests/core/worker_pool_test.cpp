// WorkerPool: a failing worker's cause (id, device, phase, message) reaches the coordinator; peers
// blocked in an in-process collective are woken and do not mask it; clean runs return normally;
// stop requests reach every worker, including one made before the run starts.
#include "core/worker_pool.h"

#include <signal.h>

#include <atomic>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

#include "comm/in_process.h"
#include "comm/rank_threads.h"
#include "core/error.h"
#include "core/rng.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::within_deadline;

std::vector<std::string> cpu_devices(int n) {
    std::vector<std::string> d;
    for (int i = 0; i < n; ++i) d.push_back("cpu:" + std::to_string(i));
    return d;
}

// Runs pool.run(fn) under a deadline and returns the error it threw ("" when none).
std::string run_pool(WorkerPool& pool, const std::function<void(WorkerContext&)>& fn) {
    std::string err;
    within_deadline(std::chrono::seconds(20), [&] {
        try {
            pool.run(fn);
        } catch (const Error& e) {
            err = e.what();
            if (err.empty()) err = "(empty message)";
        }
    });
    return err;
}

TEST(WorkerPool, CleanRunReturnsNormally) {
    auto sink = LogSink::capturing(LogLevel::info);
    WorkerPool pool(4, cpu_devices(4), Logger(sink, "train"));
    InProcessGroup group(4);
    std::mutex mu;
    std::set<std::pair<int, std::string>> seen;
    std::vector<float> sums(4, 0.0f);
    const std::string err = run_pool(pool, [&](WorkerContext& ctx) {
        EXPECT_EQ(ctx.count(), 4);
        EXPECT_EQ(ctx.phase(), "startup");
        ctx.log().info("ready");
        ctx.set_phase("step 0");
        float x = static_cast<float>(ctx.id());
        group.rank(ctx.id()).all_reduce_sum(&x, 1);
        sums[ctx.id()] = x;
        std::lock_guard lock(mu);
        seen.emplace(ctx.id(), ctx.device());
    });
    EXPECT_EQ(err, "");
    EXPECT_FALSE(pool.failure().has_value());
    EXPECT_EQ(seen, (std::set<std::pair<int, std::string>>{
                        {0, "cpu:0"}, {1, "cpu:1"}, {2, "cpu:2"}, {3, "cpu:3"}}));
    for (float s : sums) EXPECT_EQ(s, 6.0f);
    // Each worker's logger carries its id.
    int ready = 0;
    for (const auto& line : sink->captured())
        if (line.find("train/worker ") != std::string::npos &&
            line.find(": ready") != std::string::npos)
            ++ready;
    EXPECT_EQ(ready, 4);
}

// The scenario of docs/design.md "Errors": worker 1 fails while starting up; the others are blocked
// in a barrier waiting for it. Repeated with random timing: the cause must never be masked by the
// peers' "aborted" errors, and nobody may hang.
TEST(WorkerPool, StartupFailureNamesTheCauseAndWakesBlockedPeers) {
    for (int iter = 0; iter < 30; ++iter) {
        auto sink = LogSink::capturing(LogLevel::info);
        WorkerPool pool(4, cpu_devices(4), Logger(sink, ""));
        InProcessGroup group(4);
        pool.add_abort_hook([&](const std::string& reason) { group.abort(reason); });
        std::atomic<int> woken{0};
        Rng rng(static_cast<uint64_t>(iter));
        std::vector<int> delay_us;
        for (int i = 0; i < 4; ++i) delay_us.push_back(static_cast<int>(rng.below(3000)));

        const std::string err = run_pool(pool, [&](WorkerContext& ctx) {
            std::this_thread::sleep_for(std::chrono::microseconds(delay_us[ctx.id()]));
            if (ctx.id() == 1) throw Error("shard /data/s7.bin is truncated at byte 4096");
            try {
                group.rank(ctx.id()).barrier();
            } catch (const Error&) {
                woken.fetch_add(1);
                EXPECT_TRUE(ctx.stop_requested());
                throw;
            }
            ADD_FAILURE() << "worker " << ctx.id() << " passed a barrier worker 1 never reached";
        });

        ASSERT_EQ(err,
                  "worker 1 (cpu:1) failed during startup: shard /data/s7.bin is truncated at "
                  "byte 4096")
            << "iteration " << iter;
        const auto f = pool.failure();
        ASSERT_TRUE(f.has_value());
        EXPECT_EQ(f->worker, 1);
        EXPECT_EQ(f->device, "cpu:1");
        EXPECT_EQ(f->phase, "startup");
        EXPECT_EQ(f->message, "shard /data/s7.bin is truncated at byte 4096");
        EXPECT_EQ(woken.load(), 3);
        // The coordinator's log names the cause too.
        int cause_lines = 0;
        for (const auto& line : sink->captured())
            if (line.find("error") != std::string::npos &&
                line.find("worker 1 (cpu:1) failed during startup") != std::string::npos)
                ++cause_lines;
        EXPECT_EQ(cause_lines, 1);
    }
}

TEST(WorkerPool, FailureNamesTheCurrentPhase) {
    WorkerPool pool(3, {"cuda:0", "cuda:1", "cuda:2"}, Logger());
    const std::string err = run_pool(pool, [&](WorkerContext& ctx) {
        for (int step = 0; step < 20 && !ctx.stop_requested(); ++step) {
            ctx.set_phase("step " + std::to_string(step));
            if (ctx.id() == 2 && step == 12) DF_CHECK(false, "loss is NaN (lr={})", 3.0);
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    });
    EXPECT_EQ(err.rfind("worker 2 (cuda:2) failed during step 12: loss is NaN (lr=3)", 0), 0u)
        << err;
}

TEST(WorkerPool, NonStandardExceptionIsStillReported) {
    WorkerPool pool(2, cpu_devices(2), Logger());
    const std::string err = run_pool(pool, [&](WorkerContext& ctx) {
        ctx.set_phase("checkpoint");
        if (ctx.id() == 0) throw 42;
    });
    EXPECT_EQ(err,
              "worker 0 (cpu:0) failed during checkpoint: unknown exception (not derived from "
              "std::exception)");
}

TEST(WorkerPool, TheFailuresKindIsKept) {
    // A bug in a worker stays a bug and a device failure stays one when run() rethrows, so that
    // the command prints each as what it is (core/error.h); a user error stays a user error.
    auto rethrown = [](const std::function<void()>& fail) {
        WorkerPool pool(2, {"cuda:0", "cuda:1"}, Logger());
        std::optional<ErrorKind> kind;
        std::string where;
        try {
            pool.run([&](WorkerContext& ctx) {
                if (ctx.id() == 1) fail();
            });
        } catch (const Error& e) {
            kind = e.kind();
            where = e.where();
            EXPECT_EQ(std::string(e.what()).rfind("worker 1 (cuda:1) failed during startup: ", 0),
                      0u)
                << e.what();
        }
        EXPECT_TRUE(kind.has_value()) << "run() did not throw";
        return std::pair{kind.value_or(ErrorKind::user), where};
    };
    const auto bug = rethrown([] { DF_ASSERT(1 + 1 == 3); });
    EXPECT_EQ(bug.first, ErrorKind::internal);
    EXPECT_TRUE(bug.second.starts_with("worker_pool_test.cpp:")) << bug.second;
    EXPECT_EQ(rethrown([] { throw DeviceError("CUDA error cudaErrorLaunchFailure"); }).first,
              ErrorKind::device);
    EXPECT_EQ(rethrown([] { DF_CHECK(false, "shard is truncated"); }).first, ErrorKind::user);
    EXPECT_EQ(rethrown([] { throw std::out_of_range("vector"); }).first, ErrorKind::user);
}

TEST(WorkerPool, RequestStopReachesEveryWorker) {
    WorkerPool pool(3, cpu_devices(3), Logger());
    std::atomic<int> running{0};
    std::string err;
    std::thread stopper([&] {
        while (running.load() < 3) std::this_thread::yield();
        pool.request_stop();
    });
    err = run_pool(pool, [&](WorkerContext& ctx) {
        running.fetch_add(1);
        while (!ctx.stop_requested()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    });
    stopper.join();
    EXPECT_EQ(err, "");
    EXPECT_TRUE(pool.stop_requested());
    EXPECT_FALSE(pool.failure().has_value());
}

TEST(WorkerPool, AStopRequestedBeforeTheRunIsNotLost) {
    // As a Ctrl-C that arrives while the command is still starting up: the watcher has already
    // asked the StopSource to stop when run() begins.
    StopSource stop;
    WorkerPool pool(2, cpu_devices(2), Logger(), &stop);
    stop.request(SIGINT);
    stop.request(SIGTERM);  // the first signal is the one reported
    std::atomic<int> saw_stop{0};
    EXPECT_EQ(run_pool(pool,
                       [&](WorkerContext& ctx) {
                           if (ctx.stop_requested()) saw_stop.fetch_add(1);
                       }),
              "");
    EXPECT_EQ(saw_stop.load(), 2);
    EXPECT_EQ(stop.signal(), SIGINT);
    // A failure's stop belongs to its run; a requested stop stays.
    EXPECT_TRUE(pool.stop_requested());
}

TEST(WorkerPool, PoolIsReusableAfterAFailure) {
    WorkerPool pool(2, cpu_devices(2), Logger());
    EXPECT_NE(run_pool(pool, [](WorkerContext& ctx) { throw Error("first"); }), "");
    EXPECT_TRUE(pool.failure().has_value());
    std::atomic<int> ran{0};
    EXPECT_EQ(run_pool(pool,
                       [&](WorkerContext& ctx) {
                           EXPECT_FALSE(ctx.stop_requested());
                           ran.fetch_add(1);
                       }),
              "");
    EXPECT_EQ(ran.load(), 2);
    EXPECT_FALSE(pool.failure().has_value());
}

TEST(WorkerPool, RejectsBadConfiguration) {
    EXPECT_THROW(WorkerPool(0, {}, Logger()), Error);
    try {
        WorkerPool(2, {"cpu:0"}, Logger());
        ADD_FAILURE() << "mismatched device list accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("1 device names for 2 workers"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace dflash

// cpu::ThreadPool and cpu::parallel_for: every part runs exactly once, on several threads; many
// back-to-back runs; a part's exception reaches the caller and leaves the pool usable; a nested
// run runs inline; workers block process signals; parallel_for's ranges tile [0, n).
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/test_util.h"

namespace dflash {
namespace {

TEST(ThreadPool, EveryPartRunsOnceOnSeveralThreads) {
    cpu::ThreadPool pool(3);
    EXPECT_EQ(pool.threads(), 3);
    std::vector<std::atomic<int>> hits(1000);
    std::mutex mu;
    std::set<std::thread::id> ids;
    pool.run(1000, [&](int64_t p) {
        hits[p].fetch_add(1);
        // Slow enough that the sleeping workers wake and take parts.
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        const std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    EXPECT_GE(ids.size(), 2u);
}

TEST(ThreadPool, ManyShortRunsInARow) {
    cpu::ThreadPool pool(2);
    int64_t total = 0;
    std::atomic<int64_t> sum{0};
    for (int r = 0; r < 20000; ++r) {
        pool.run(3, [&](int64_t p) { sum.fetch_add(p + 1); });
        total += 6;
    }
    EXPECT_EQ(sum.load(), total);
}

// A pool's destructor once waited forever for a worker that missed its wake-up.
TEST(ThreadPool, CreateRunAndDestroyManyTimes) {
    for (int r = 0; r < 500; ++r) {
        cpu::ThreadPool pool(1 + r % 3);
        std::atomic<int> n{0};
        pool.run(1 + r % 4, [&](int64_t) { n.fetch_add(1); });
        ASSERT_EQ(n.load(), 1 + r % 4);
    }
}

TEST(ThreadPool, ExceptionReachesTheCallerAndThePoolStaysUsable) {
    cpu::ThreadPool pool(3);
    EXPECT_THROW(pool.run(50,
                          [&](int64_t p) {
                              if (p == 17) throw std::runtime_error("part 17");
                          }),
                 std::runtime_error);
    std::atomic<int> n{0};
    pool.run(50, [&](int64_t) { n.fetch_add(1); });
    EXPECT_EQ(n.load(), 50);
}

TEST(ThreadPool, NestedRunRunsInline) {
    cpu::ThreadPool pool(2);
    std::atomic<int> n{0};
    pool.run(4, [&](int64_t) {
        const auto me = std::this_thread::get_id();
        pool.run(5, [&](int64_t) {
            EXPECT_EQ(std::this_thread::get_id(), me);
            n.fetch_add(1);
        });
    });
    EXPECT_EQ(n.load(), 20);
}

TEST(ThreadPool, WorkersBlockSignals) {
    cpu::ThreadPool pool(3);
    const auto caller = std::this_thread::get_id();
    std::atomic<int> worker_parts{0}, unblocked{0};
    pool.run(64, [&](int64_t) {
        std::this_thread::sleep_for(std::chrono::microseconds(300));
        if (std::this_thread::get_id() == caller) return;
        sigset_t cur;
        pthread_sigmask(SIG_BLOCK, nullptr, &cur);
        worker_parts.fetch_add(1);
        if (!sigismember(&cur, SIGINT) || !sigismember(&cur, SIGTERM)) unblocked.fetch_add(1);
    });
    EXPECT_GT(worker_parts.load(), 0);
    EXPECT_EQ(unblocked.load(), 0);
}

TEST(ThreadPool, ParallelForTilesTheRange) {
    const cpu::PooledExec ex{3};
    for (const int64_t n : {0, 1, 2, 3, 7, 1000}) {
        for (const bool parallel : {false, true}) {
            std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
            std::atomic<int> calls{0};
            cpu::parallel_for(ex, n, parallel, [&](int64_t b, int64_t e) {
                calls.fetch_add(1);
                for (int64_t i = b; i < e; ++i) hits[i].fetch_add(1);
            });
            for (auto& h : hits) EXPECT_EQ(h.load(), 1);
            EXPECT_EQ(calls.load(), n == 0 ? 0 : (parallel ? std::min<int64_t>(3, n) : 1));
        }
    }
}

}  // namespace
}  // namespace dflash

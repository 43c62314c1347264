// Test helpers for code that runs on several threads: a deadline that turns a hang into a visible
// failure, and a runner that drives one function per rank and collects each rank's error.
// Used by tests/comm/in_process_test.cpp and tests/core/worker_pool_test.cpp.
#pragma once

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace dflash::test {

// Runs fn on a helper thread and waits at most `limit`. A hang aborts the process with a message
// (CTest reports the test as failed) instead of stalling the suite; exceptions are rethrown.
inline void within_deadline(std::chrono::milliseconds limit, std::function<void()> fn) {
    std::packaged_task<void()> task(std::move(fn));
    std::future<void> done = task.get_future();
    std::thread t(std::move(task));
    if (done.wait_for(limit) != std::future_status::ready) {
        std::fprintf(stderr, "HANG: did not finish within %lld ms\n",
                     static_cast<long long>(limit.count()));
        std::abort();
    }
    t.join();
    done.get();
}

// Runs fn(rank) on `ranks` threads (under a 20 s deadline) and returns each rank's error message,
// empty for ranks that returned normally.
inline std::vector<std::string> run_ranks(int ranks, const std::function<void(int)>& fn) {
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    within_deadline(std::chrono::seconds(20), [&] {
        std::vector<std::thread> threads;
        for (int r = 0; r < ranks; ++r) {
            threads.emplace_back([&, r] {
                try {
                    fn(r);
                } catch (const std::exception& e) {
                    errors[static_cast<size_t>(r)] = e.what();
                    if (errors[static_cast<size_t>(r)].empty())
                        errors[static_cast<size_t>(r)] = "(empty message)";
                }
            });
        }
        for (auto& t : threads) t.join();
    });
    return errors;
}

}  // namespace dflash::test

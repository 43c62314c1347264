// ThreadPool (thread_pool.h, Note [CPU threads]). Tested by tests/ops/thread_pool_test.cpp.
#include "backend/cpu/thread_pool.h"

#include <pthread.h>
#include <signal.h>

#include "core/error.h"

namespace dflash::cpu {
namespace {

// Spins before sleeping: a region that follows another within microseconds (the usual case
// inside one op sequence) then costs no system call, and a worker on a busy core stops competing
// for it almost at once.
constexpr int kSpins = 2000;

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// Waits until `a` differs from `old`: a short spin, then the futex.
template <typename T>
void wait_for_change(const std::atomic<T>& a, T old) {
    for (int i = 0; i < kSpins; ++i) {
        if (a.load(std::memory_order_acquire) != old) return;
        cpu_relax();
    }
    while (a.load(std::memory_order_acquire) == old) a.wait(old, std::memory_order_acquire);
}

}  // namespace

ThreadPool::ThreadPool(int threads) {
    DF_CHECK(threads >= 1 && threads <= 1024, "cpu thread pool: {} threads, expected 1..1024",
             threads);
    workers_.reserve(static_cast<size_t>(threads - 1));
    for (int t = 1; t < threads; ++t) workers_.emplace_back([this] { work_loop(); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true, std::memory_order_release);
    epoch_.fetch_add(1, std::memory_order_acq_rel);
    epoch_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::do_parts() {
    for (;;) {
        const int64_t part = next_.fetch_add(1, std::memory_order_relaxed);
        if (part >= parts_) return;
        try {
            fn_(ctx_, part);
        } catch (...) {
            const std::lock_guard<std::mutex> lock(error_mu_);
            if (!error_) error_ = std::current_exception();
        }
    }
}

void ThreadPool::work_loop() {
    // Process-directed signals (Ctrl-C) go to a thread that does not block them: never to a
    // worker, whose default action would end the process (train/signal_watcher.cpp).
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    uint64_t seen = 0;
    for (;;) {
        wait_for_change(epoch_, seen);
        seen = epoch_.load(std::memory_order_acquire);
        if (stop_.load(std::memory_order_acquire)) return;
        do_parts();
        if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) busy_.notify_one();
    }
}

void ThreadPool::run_erased(int64_t parts, PartFn fn, void* ctx) {
    if (parts <= 0) return;
    if (parts == 1 || workers_.empty() || running_.exchange(true, std::memory_order_acquire)) {
        // One part, no workers, or a call from inside a part: inline, in part order.
        for (int64_t p = 0; p < parts; ++p) fn(ctx, p);
        return;
    }
    fn_ = fn;
    ctx_ = ctx;
    parts_ = parts;
    error_ = nullptr;
    next_.store(0, std::memory_order_relaxed);
    busy_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
    epoch_.fetch_add(1, std::memory_order_acq_rel);  // publishes the fields above
    epoch_.notify_all();
    do_parts();
    for (int b = busy_.load(std::memory_order_acquire); b != 0;
         b = busy_.load(std::memory_order_acquire)) {
        wait_for_change(busy_, b);
    }
    std::exception_ptr error = std::move(error_);
    error_ = nullptr;
    running_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
}

}  // namespace dflash::cpu

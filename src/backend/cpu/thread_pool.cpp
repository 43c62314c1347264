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
    wake_.fetch_add(1, std::memory_order_acq_rel);
    wake_.notify_all();
    for (auto& w : workers_) w.join();
}

void ThreadPool::run_claimed_parts(uint64_t& seen) {
    for (;;) {
        const uint64_t parts = (seen >> 16) & 0xFFFF, next = seen & 0xFFFF;
        if (next >= parts) return;
        if (!claim_.compare_exchange_weak(seen, seen + 1, std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
            continue;  // `seen` now holds the current word
        }
        try {
            fn_(ctx_, static_cast<int64_t>(next));
        } catch (...) {
            const std::lock_guard<std::mutex> lock(error_mu_);
            if (!error_) error_ = std::current_exception();
        }
        if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == static_cast<int32_t>(parts))
            done_.notify_one();
        seen = claim_.load(std::memory_order_acquire);
    }
}

void ThreadPool::work_loop() {
    // Process-directed signals (Ctrl-C) go to a thread that does not block them: never to a
    // worker, whose default action would end the process (train/signal_watcher.cpp).
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    for (;;) {
        // wake_ before claim_: a run published after this read of claim_ changes wake_.
        const uint32_t w = wake_.load(std::memory_order_acquire);
        if (stop_.load(std::memory_order_acquire)) return;
        uint64_t seen = claim_.load(std::memory_order_acquire);
        run_claimed_parts(seen);
        wait_for_change(wake_, w);
    }
}

void ThreadPool::run_erased(int64_t parts, PartFn fn, void* ctx) {
    if (parts <= 0) return;
    DF_CHECK(parts <= kMaxParts, "cpu thread pool: {} parts in one run, at most {}", parts,
             kMaxParts);
    if (parts == 1 || workers_.empty() || running_.exchange(true, std::memory_order_acquire)) {
        // One part, no workers, or a call from inside a part: inline, in part order.
        for (int64_t p = 0; p < parts; ++p) fn(ctx, p);
        return;
    }
    fn_ = fn;
    ctx_ = ctx;
    error_ = nullptr;
    done_.store(0, std::memory_order_relaxed);
    ++run_id_;
    uint64_t seen = (uint64_t{run_id_} << 32) | (static_cast<uint64_t>(parts) << 16);
    claim_.store(seen, std::memory_order_release);  // publishes the fields above
    wake_.fetch_add(1, std::memory_order_acq_rel);
    wake_.notify_all();
    run_claimed_parts(seen);
    // Every part is claimed; wait for those still running on a worker.
    for (int32_t d = done_.load(std::memory_order_acquire); d != parts;
         d = done_.load(std::memory_order_acquire)) {
        wait_for_change(done_, d);
    }
    std::exception_ptr error = std::move(error_);
    error_ = nullptr;
    running_.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
}

}  // namespace dflash::cpu

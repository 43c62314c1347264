// ThreadPool: the CPU backend's own worker threads (one backend, one pool; docs/design.md "Memory
// and threads": state lives in objects you are handed). Tested by tests/ops/thread_pool_test.cpp.
//
// Note [CPU threads]: the CPU ops used to run on OpenMP teams. libgomp's threads spin at every
// barrier, so on a loaded machine a team waits for a descheduled member while its other members
// burn the core it needs (one 2-thread worker ran 3x slower than two 1-thread workers,
// docs/performance.md). The pool's threads spin only briefly and then sleep on a futex
// (std::atomic::wait), so a busy machine costs a wake-up per parallel region, not a core. Work is
// split into parts whose bounds depend only on the part count, never on which thread runs a
// part, so results do not depend on scheduling; each op's own note says why its bits do not
// depend on the thread count either.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace dflash::cpu {

class ThreadPool {
  public:
    // `threads` in all, the calling thread included: threads - 1 workers are started now.
    explicit ThreadPool(int threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int threads() const { return static_cast<int>(workers_.size()) + 1; }

    // Calls fn(part) once for every part in [0, parts) (at most kMaxParts), on the workers and the
    // calling thread,
    // and returns when all calls have returned; the first exception one of them threw is
    // rethrown here. One caller at a time (the backend's driving thread); a call made while a
    // run is in progress (from inside a part) runs its parts inline, in order, on its thread.
    template <typename Fn>
    void run(int64_t parts, Fn&& fn) {
        run_erased(parts, &call<std::remove_reference_t<Fn>>, &fn);
    }

    static constexpr int64_t kMaxParts = 0xFFFF;

  private:
    using PartFn = void (*)(void* ctx, int64_t part);
    template <typename Fn>
    static void call(void* ctx, int64_t part) {
        (*static_cast<Fn*>(ctx))(part);
    }
    void run_erased(int64_t parts, PartFn fn, void* ctx);
    void work_loop();
    // Claims and runs parts of the current run until none is left; `seen` is the claim word the
    // caller last read (updated).
    void run_claimed_parts(uint64_t& seen);

    std::vector<std::thread> workers_;
    // The claim word: run id (32 bits) | parts (16) | next unclaimed part (16). A part is claimed
    // by a compare-exchange that bumps `next`, so a claim can only succeed for the current run.
    std::atomic<uint64_t> claim_{0};
    // Sleeping goes through 32-bit words only (a futex on the word itself; GCC 12's libstdc++ waits
    // on wider types through a shared proxy, which lost wake-ups here: a pool's destructor hung).
    std::atomic<uint32_t> wake_{0};  // bumped after each change of claim_ that workers must see
    std::atomic<int32_t> done_{0};   // parts of the current run that have returned
    std::atomic<bool> running_{false};
    std::atomic<bool> stop_{false};
    uint32_t run_id_ = 0;
    // The current run's function; written before its claim word is published, read only by a
    // thread holding a claim of that run.
    PartFn fn_ = nullptr;
    void* ctx_ = nullptr;
    std::mutex error_mu_;
    std::exception_ptr error_;
};

}  // namespace dflash::cpu

// SignalWatcher. Tested by tests/train/signal_test.cpp.
#include "train/signal_watcher.h"

#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "core/error.h"

// The kernel hands a process-directed signal to any thread that does not block it. Threads
// started after this constructor inherit its mask; the CPU backend's pool threads block every
// signal themselves (backend/cpu/thread_pool.cpp), whenever they were started.

namespace dflash::train {

SignalWatcher::SignalWatcher(std::function<void(int)> on_signal)
    : on_signal_(std::move(on_signal)) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    const int rc = pthread_sigmask(SIG_BLOCK, &set_, &old_mask_);
    DF_ASSERT(rc == 0, "pthread_sigmask failed ({})", rc);
    thread_ = std::thread([this] { wait_loop(); });
}

SignalWatcher::~SignalWatcher() {
    closing_.store(true, std::memory_order_release);
    // The waiting thread has SIGTERM blocked and sits in sigwait(): this wakes it.
    pthread_kill(thread_.native_handle(), SIGTERM);
    thread_.join();
    // A signal that arrived after the loop ended would kill the process once unblocked; the run
    // is over by now, so it is dropped.
    timespec zero{};
    while (sigtimedwait(&set_, nullptr, &zero) > 0) {
    }
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

void SignalWatcher::wait_loop() {
    int count = 0;
    for (;;) {
        int sig = 0;
        if (sigwait(&set_, &sig) != 0) continue;
        if (closing_.load(std::memory_order_acquire)) return;
        if (++count > 1) {
            std::fputs("\nsecond interrupt: exiting without a checkpoint\n", stderr);
            std::_Exit(128 + sig);
        }
        on_signal_(sig);
    }
}

}  // namespace dflash::train

// Ctrl-C / SIGTERM during training without a signal handler or a global flag: SIGINT and SIGTERM
// are blocked in the thread that creates the watcher (and so in every thread started after it,
// which inherit the mask), and one thread waits for them with sigwait() and calls a callback
// (the trainer's pool.request_stop()). A second signal ends the process at once. Threads that
// existed before the watcher and do not block the signals could still take them, so the watcher
// is made before any worker starts (the CPU backend's pool threads block every signal
// themselves).
// Tested by tests/train/signal_test.cpp.
#pragma once

#include <signal.h>

#include <atomic>
#include <functional>
#include <thread>

namespace dflash::train {

class SignalWatcher {
  public:
    // Blocks SIGINT and SIGTERM in the calling thread and starts the waiting thread.
    explicit SignalWatcher(std::function<void(int signal)> on_signal);
    // Stops the waiting thread, drops signals still pending and restores the calling thread's
    // signal mask. Must run on the thread that created the watcher.
    ~SignalWatcher();
    SignalWatcher(const SignalWatcher&) = delete;
    SignalWatcher& operator=(const SignalWatcher&) = delete;

  private:
    void wait_loop();

    std::function<void(int)> on_signal_;
    sigset_t set_;
    sigset_t old_mask_;
    std::atomic<bool> closing_{false};
    std::thread thread_;
};

}  // namespace dflash::train

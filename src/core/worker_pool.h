// WorkerPool: runs one function on N fresh threads (one per device) and makes a failing worker say
// why (docs/design.md "Errors"): the first exception is recorded with worker id, device, phase and
// message, the other workers are told to stop (abort hooks wake any blocked in a collective), and
// after all have joined run() rethrows that first cause. A StopSource carries a request to stop
// (Ctrl-C) that may come before the workers start: it is never cleared by run(). Tested by
// tests/core/worker_pool_test.cpp.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/logging.h"

namespace dflash {

// A request to stop, shared by whoever asks (a signal watcher, a test) and the pools that honour
// it. It lives outside any one run, so a request made while a command is still starting up (before
// the workers exist) is seen by the workers' first check. Thread-safe; a request is never undone.
class StopSource {
  public:
    // `signal`: the signal that asked (SIGINT, SIGTERM), or 0. The first request's signal stays.
    void request(int signal = 0);
    bool requested() const { return requested_.load(std::memory_order_acquire); }
    int signal() const { return signal_.load(std::memory_order_acquire); }

  private:
    std::atomic<bool> requested_{false};
    std::atomic<int> signal_{0};
};

struct WorkerFailure {
    int worker = -1;
    std::string device;
    std::string phase;
    std::string message;
    // The failing exception's kind and origin, so that run() rethrows a bug as a bug and a device
    // failure as one (main prints each kind its own way).
    ErrorKind kind = ErrorKind::user;
    std::string where;
};

// "worker 1 (cpu:1) failed during startup: <message>"
std::string describe_failure(const WorkerFailure& f);

class WorkerPool;

// Handed to each worker's function; lives for one run() on that worker's thread.
class WorkerContext {
  public:
    int id() const { return id_; }
    int count() const { return count_; }
    const std::string& device() const { return device_; }
    // What the worker is doing now ("startup", "step 12", "checkpoint", "capture"); named in the
    // error if it fails. Starts as "startup".
    void set_phase(std::string phase);
    std::string phase() const;
    // True once another worker failed or a stop was requested (request_stop() or the pool's
    // StopSource): finish the current unit of work and return.
    bool stop_requested() const;
    const Logger& log() const { return log_; }

  private:
    friend class WorkerPool;
    WorkerContext(WorkerPool& pool, int id, int count, std::string device, Logger log);

    WorkerPool& pool_;
    int id_;
    int count_;
    std::string device_;
    Logger log_;
    mutable std::mutex phase_mutex_;  // a monitor may read the phase while the worker sets it
    std::string phase_;
};

class WorkerPool {
  public:
    // devices[i] names worker i's device ("cpu:0", "cuda:1"); one per worker. `stop` (may be null:
    // the pool then owns one) is where stop requests are made and read; it must outlive the pool.
    WorkerPool(int workers, std::vector<std::string> devices, Logger log,
               StopSource* stop = nullptr);
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    int workers() const { return workers_; }
    const std::vector<std::string>& devices() const { return devices_; }

    // Runs fn on `workers` fresh std::threads and joins them all. If any throws, the first failure
    // is recorded, stop is requested for the others and every abort hook is called with the
    // failure's description; after all have joined, run() throws that description as an error of
    // the failure's kind (UserError, InternalError or DeviceError). Each run starts with a clear
    // failure; a stop request stays (see StopSource).
    void run(const std::function<void(WorkerContext&)>& fn);

    // Called (from the failing worker's thread) when a worker fails, e.g. to abort a communicator
    // so that peers blocked in a collective wake up and return. Hooks must not throw.
    void add_abort_hook(std::function<void(const std::string& reason)> hook);

    // Asks workers to stop (e.g. on Ctrl-C); they see stop_requested() and return at a point where
    // they agree with their peers. Abort hooks are not called: that is for failures only.
    void request_stop() { stop_->request(); }
    // A stop was requested, or a worker of the current run failed.
    bool stop_requested() const {
        return failed_.load(std::memory_order_acquire) || stop_->requested();
    }

    std::optional<WorkerFailure> failure() const;

  private:
    void run_one(WorkerContext& ctx, const std::function<void(WorkerContext&)>& fn);
    void record_failure(WorkerFailure f);

    int workers_;
    std::vector<std::string> devices_;
    Logger log_;
    StopSource own_stop_;
    StopSource* stop_;                 // own_stop_ or the caller's
    std::atomic<bool> failed_{false};  // a worker of this run failed: the others stop too
    mutable std::mutex mutex_;         // guards failure_ and hooks_
    std::optional<WorkerFailure> failure_;
    std::vector<std::function<void(const std::string&)>> hooks_;
};

}  // namespace dflash

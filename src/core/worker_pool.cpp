// Worker threads with first-failure reporting. Tested by tests/core/worker_pool_test.cpp.
#include "core/worker_pool.h"

#include <exception>
#include <memory>
#include <system_error>
#include <thread>

#include "core/error.h"

namespace dflash {

std::string describe_failure(const WorkerFailure& f) {
    return fmt::format("worker {} ({}) failed during {}: {}", f.worker, f.device, f.phase,
                       f.message);
}

WorkerContext::WorkerContext(WorkerPool& pool, int id, int count, std::string device, Logger log)
    : pool_(pool),
      id_(id),
      count_(count),
      device_(std::move(device)),
      log_(std::move(log)),
      phase_("startup") {}

void WorkerContext::set_phase(std::string phase) {
    std::lock_guard lock(phase_mutex_);
    phase_ = std::move(phase);
}

std::string WorkerContext::phase() const {
    std::lock_guard lock(phase_mutex_);
    return phase_;
}

bool WorkerContext::stop_requested() const {
    return pool_.stop_requested();
}

void StopSource::request(int signal) {
    int none = 0;
    if (signal != 0) signal_.compare_exchange_strong(none, signal, std::memory_order_acq_rel);
    requested_.store(true, std::memory_order_release);
}

WorkerPool::WorkerPool(int workers, std::vector<std::string> devices, Logger log, StopSource* stop)
    : workers_(workers),
      devices_(std::move(devices)),
      log_(std::move(log)),
      stop_(stop != nullptr ? stop : &own_stop_) {
    DF_CHECK(workers >= 1, "WorkerPool needs at least 1 worker, got workers={}", workers);
    DF_CHECK(devices_.size() == static_cast<size_t>(workers),
             "WorkerPool got {} device names for {} workers; give one device per worker",
             devices_.size(), workers);
}

void WorkerPool::add_abort_hook(std::function<void(const std::string& reason)> hook) {
    std::lock_guard lock(mutex_);
    hooks_.push_back(std::move(hook));
}

std::optional<WorkerFailure> WorkerPool::failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
}

void WorkerPool::record_failure(WorkerFailure f) {
    const std::string reason = describe_failure(f);
    std::vector<std::function<void(const std::string&)>> hooks;
    {
        std::lock_guard lock(mutex_);
        if (failure_) {
            // Peers woken by the abort usually fail too; their errors are consequences, not causes.
            log_.debug("after the first failure, also {}", reason);
            return;
        }
        failure_ = std::move(f);
        hooks = hooks_;
    }
    log_.error("{}", reason);
    failed_.store(true, std::memory_order_release);
    // Hooks run outside the lock: they may block briefly (e.g. take a communicator's lock).
    for (const auto& hook : hooks) {
        try {
            hook(reason);
        } catch (const std::exception& e) {
            log_.error("abort hook failed: {}", e.what());
        }
    }
}

void WorkerPool::run_one(WorkerContext& ctx, const std::function<void(WorkerContext&)>& fn) {
    WorkerFailure f;
    try {
        fn(ctx);
        return;
    } catch (const Error& e) {
        f.message = e.what();
        f.kind = e.kind();
        f.where = e.where();
    } catch (const std::exception& e) {
        f.message = e.what();
    } catch (...) {
        f.message = "unknown exception (not derived from std::exception)";
    }
    f.worker = ctx.id();
    f.device = ctx.device();
    f.phase = ctx.phase();
    record_failure(std::move(f));
}

void WorkerPool::run(const std::function<void(WorkerContext&)>& fn) {
    {
        std::lock_guard lock(mutex_);
        failure_.reset();
    }
    // Only this pool's failure is cleared: a stop requested before the run (a Ctrl-C during
    // start-up) must still stop it.
    failed_.store(false, std::memory_order_release);

    std::vector<std::unique_ptr<WorkerContext>> contexts;
    for (int i = 0; i < workers_; ++i) {
        const std::string& dev = devices_[static_cast<size_t>(i)];
        contexts.push_back(std::unique_ptr<WorkerContext>(new WorkerContext(
            *this, i, workers_, dev, log_.with_prefix(fmt::format("worker {}", i)))));
    }
    std::vector<std::thread> threads;
    threads.reserve(contexts.size());
    for (auto& ctx : contexts) {
        try {
            threads.emplace_back([this, &fn, c = ctx.get()] { run_one(*c, fn); });
        } catch (const std::system_error& e) {
            // Workers already started may be waiting for this one: fail as it would have.
            WorkerFailure f;
            f.worker = ctx->id();
            f.device = ctx->device();
            f.phase = "thread start";
            f.message = fmt::format("cannot start a thread: {}", e.what());
            record_failure(std::move(f));
            break;
        }
    }
    for (auto& t : threads) t.join();

    std::lock_guard lock(mutex_);
    if (failure_) throw_error(failure_->kind, describe_failure(*failure_), failure_->where);
}

}  // namespace dflash

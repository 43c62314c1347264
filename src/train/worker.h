// One training worker's life (design "Memory and threads"): its backend, replica, gradient
// exchange, optimizer and data slice; every optimizer step, evaluation, replica check and
// checkpoint it takes part in; and the state all workers of a process share (Shared), which
// run_trainer makes and worker 0 reports into. Tested by tests/train/trainer_test.cpp,
// eval_decode_test.cpp, divergence_test.cpp, optimizer_shard_test.cpp and signal_test.cpp.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "comm/world_group.h"
#include "config/settings.h"
#include "core/logging.h"
#include "core/worker_pool.h"
#include "train/checkpoint.h"
#include "train/loop_options.h"
#include "train/metrics.h"
#include "train/trainer.h"

namespace dflash::train {

using Clock = std::chrono::steady_clock;

// State every worker reads and worker 0 writes results into (only worker 0 touches `summary`).
struct Shared {
    const TrainerSpec& spec;
    const config::Settings& settings;
    const Logger& log;
    LoopOptions opt;
    int64_t total_steps = 0;
    DatasetIdentity data;  // of spec.train_data, recorded in every checkpoint
    std::optional<TrainingState> resume;
    std::vector<LoaderState> resume_loaders;  // [world]: each worker's data position
    WorldGroup group;
    Clock::time_point start = Clock::now();
    bool tty = false;
    std::optional<MetricsLog> metrics;  // worker 0 appends
    TrainSummary summary;
    // The workers' device collectives, so that a worker's failure (WorkerPool's abort hook)
    // ends the others' waits on their devices too.
    std::mutex collectives_mu;
    std::vector<DeviceCollectives*> collectives;

    void add_collectives(DeviceCollectives* c) {
        std::lock_guard lock(collectives_mu);
        collectives.push_back(c);
    }
    void remove_collectives(DeviceCollectives* c) {
        std::lock_guard lock(collectives_mu);
        std::erase(collectives, c);
    }
    void abort_collectives(const std::string& reason) {
        std::lock_guard lock(collectives_mu);
        for (DeviceCollectives* c : collectives) c->abort(reason);
    }

    Shared(const TrainerSpec& s, const config::Settings& st, const Logger& l, LoopOptions o,
           std::unique_ptr<TcpGroup> processes)
        : spec(s), settings(st), log(l), opt(o), group(o.workers, std::move(processes)) {}
};

// Runs worker ctx.id() of this process from set-up to its last step (the body of run_trainer's
// WorkerPool threads).
void run_worker(Shared& sh, WorkerContext& ctx);

}  // namespace dflash::train

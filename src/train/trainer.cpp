// The data-parallel training loop (see trainer.h). Tested by tests/train/trainer_test.cpp,
// pretrain_test.cpp, eval_decode_test.cpp, metrics_resume_test.cpp, data_order_test.cpp,
// divergence_test.cpp, resume_test.cpp and signal_test.cpp.
#include "train/trainer.h"

#include <unistd.h>

#include "comm/launch.h"
#include "core/error.h"
#include "core/worker_pool.h"
#include "train/checkpoint.h"
#include "train/loop_options.h"
#include "train/resume.h"
#include "train/run_dir.h"
#include "train/signal_watcher.h"
#include "train/worker.h"

namespace dflash::train {
namespace {

namespace fs = std::filesystem;

int64_t count_total_steps(const TrainerSpec& spec, const LoopOptions& o) {
    const int64_t per_step = o.batch * o.accumulation;
    if (spec.max_steps > 0) return spec.max_steps;
    const PackedLoader probe(*spec.train_data, loader_options(spec.max_length, o, 0));
    const int64_t seqs = probe.total_sequences(spec.epochs);
    const int64_t total = seqs / per_step;
    DF_CHECK(total >= 1,
             "{} epoch(s) give each of the {} workers {} sequences, fewer than one "
             "optimizer step of train.batch_size x train.accumulation = {}; use more data, "
             "fewer workers, a smaller batch, or set train.max_steps",
             spec.epochs, o.world, seqs, per_step);
    return total;
}

}  // namespace

std::function<void(int)> stop_on_signal(StopSource& stop, const Logger& log) {
    return [&stop, log](int sig) {
        log.warn("{}: stopping after this step with a checkpoint (again to quit at once)",
                 sig == SIGINT ? "interrupt" : "terminate");
        stop.request(sig);
    };
}

LoaderOptions training_loader_options(const TrainingOptions& options, int64_t max_length,
                                      int rank) {
    return loader_options(max_length, loop_options(options), rank);
}

TrainSummary run_trainer(const TrainerSpec& spec, const TrainingOptions& options,
                         const config::Settings& settings, const Logger& log) {
    DF_ASSERT(spec.train_data && spec.make_task);
    const LoopOptions o = loop_options(options);
    const char* device_kind = o.backend == DeviceKind::cuda ? "cuda" : "cpu";
    const Launch& launch = o.launch;
    const bool writer = launch.rank == 0;  // the process that writes the run directory
    if (launch.world > 1)
        log.info("process {} of {} ({}): joining the others at {}:{}", launch.rank, launch.world,
                 launch.rank_source, launch.master_addr, launch.master_port);
    // Every process must run the same settings; process 0 names the first difference.
    std::string agreement = launch_agreement(settings);
    agreement += fmt::format("(workers per process) = {}\n", o.workers);
    Shared sh(spec, settings, log, o, join_processes(launch, agreement, log));
    sh.total_steps = count_total_steps(spec, o);
    sh.data = dataset_identity(*spec.train_data);
    // One writer per run directory; held until the run returns.
    std::optional<DirLock> own_lock;
    if (spec.run_dir_lock)
        DF_ASSERT(spec.run_dir_lock->dir() == spec.run_dir);
    else if (writer)
        own_lock.emplace(
            DirLock::acquire(spec.run_dir, "run directory", fmt::format("{} training", spec.kind)));
    if (spec.resume_from) {
        sh.resume = read_training_state(*spec.resume_from);
        sh.resume_loaders = check_resume(
            *sh.resume, {spec.kind, spec.train_data, spec.max_length, *spec.resume_from}, o,
            sh.total_steps, log);
    }
    // Nothing in the run directory has changed so far.
    if (writer) prepare_run_dir(spec.run_dir, settings, spec.resume_from.has_value());
    sh.summary.run_dir = spec.run_dir;
    sh.summary.metrics_path = spec.run_dir / "metrics.jsonl";
    sh.summary.total_steps = sh.total_steps;
    sh.summary.process = launch.rank;
    sh.summary.processes = launch.world;
    // An interrupted run may have logged steps after its checkpoint; they are run again, so they
    // are dropped, but only once the first step has worked (a refused resume changes nothing).
    // A fresh run replaces the records of an earlier one that never reached a checkpoint.
    if (writer) sh.metrics.emplace(sh.summary.metrics_path, sh.resume ? sh.resume->step : 0);
    sh.tty = isatty(STDOUT_FILENO) != 0;
    if (launch.world > 1)
        log.info(
            "{} training over {} processes x {} {} worker(s) = {} workers; batch {} x "
            "accumulation {} per worker",
            spec.kind, launch.world, o.workers, device_kind, o.world, o.batch, o.accumulation);
    if (o.backend == DeviceKind::cuda)
        log.info("{} training on cuda: {} steps, {} GPU worker(s), batch {} x accumulation {}",
                 spec.kind, sh.total_steps, o.workers, o.batch, o.accumulation);
    else
        log.info(
            "{} training on cpu: {} steps, {} worker(s) x {} thread(s), batch {} x "
            "accumulation {}",
            spec.kind, sh.total_steps, o.workers, o.threads, o.batch, o.accumulation);

    StopSource own_stop;
    StopSource& stop = spec.hooks.stop != nullptr ? *spec.hooks.stop : own_stop;
    std::vector<std::string> devices;
    for (int w = 0; w < o.workers; ++w)
        devices.push_back(fmt::format("{}:{}", device_kind, worker_device(o, w)));
    WorkerPool pool(o.workers, devices, log, &stop);
    pool.add_abort_hook([&sh](const std::string& reason) {
        sh.group.abort(reason);
        sh.abort_collectives(reason);
    });
    std::optional<SignalWatcher> watcher;
    if (spec.hooks.handle_signals) watcher.emplace(stop_on_signal(stop, log));
    pool.run([&sh](WorkerContext& ctx) { run_worker(sh, ctx); });
    if (sh.metrics && sh.metrics->dropped() > 0)
        log.info("{}: dropped {} record(s) after step {} written by the earlier run",
                 sh.summary.metrics_path.string(), sh.metrics->dropped(),
                 sh.resume ? sh.resume->step : 0);
    sh.summary.stop_signal = sh.summary.interrupted ? stop.signal() : 0;
    sh.summary.seconds = std::chrono::duration<double>(Clock::now() - sh.start).count();
    return sh.summary;
}

std::optional<ShardedDataset> open_eval_data(const fs::path& given, const fs::path& setting) {
    const fs::path dir = given.empty() ? setting : given;
    std::optional<ShardedDataset> eval;
    if (!dir.empty()) eval.emplace(ShardedDataset::open(dir));
    return eval;
}

}  // namespace dflash::train

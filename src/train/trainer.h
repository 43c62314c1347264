// The data-parallel training loop shared by `dflash train` (drafters) and `dflash pretrain`
// (targets), docs/training.md "What a step does", docs/training.md "Several GPUs": runtime.devices
// workers, each a WorkerPool thread with its own Backend, model replica, Workspace, optimizer and
// PackedLoader slice, exchanging gradients through a Communicator (a WorldGroup: threads of this
// process, and with launch.world_size > 1 the workers of the other processes, comm/world_group.h).
// What is trained is a WorkerTask; the loop owns batching, loss normalisation, all-reduce,
// clipping, AdamW, the schedule, metrics, evaluation, checkpoints, resume and Ctrl-C. Note
// [Worker-invariant loss]: every micro-batch's loss weight is known before its forward (anchors are
// drawn first, from (seed, epoch, global sequence index) only), the global weight sum W is
// all-reduced, each forward/backward runs with grad_scale 1/W and the gradients are summed — so N
// workers x batch b match 1 worker x batch N*b to float rounding. Tested by
// tests/train/trainer_test.cpp, tests/train/pretrain_test.cpp and, for evaluation by decoding,
// metrics on resume, data.shuffle, a NaN loss, resume rules and run-directory locks, and Ctrl-C,
// tests/train/eval_decode_test.cpp, metrics_resume_test.cpp, data_order_test.cpp,
// divergence_test.cpp, resume_test.cpp and signal_test.cpp.
//
// Where the rest of the trainer lives: training_run.h (a command's preamble: resume, settings, run
// directory, lock, datasets), loop_options.h (what the loop runs with), worker.h (one worker's
// steps, evaluations and checkpoints), gradient_exchange.h, resume.h (a checkpoint's settings and
// the checks before a resume writes anything), run_dir.h, checkpoint.h; the typed settings are
// train_options.h, filled in src/options/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "config/settings.h"
#include "core/dir_lock.h"
#include "core/logging.h"
#include "core/rng.h"
#include "core/worker_pool.h"
#include "data/dataset.h"
#include "model/params.h"
#include "train/metrics.h"
#include "train/resume.h"
#include "train/run_dir.h"
#include "train/train_options.h"

namespace dflash::train {

// One training sequence with what its loss needs, prepared before any forward.
struct MicroBatch {
    Sequence seq;
    std::vector<int32_t> anchors;  // drafter: block starts; pretraining: unused
    double weight = 0;             // this sequence's share of the loss normaliser
    uint64_t noise_seed = 0;       // drafter: train.hidden_noise's seed, from the sequence's rng
};

// Loss and accuracy sums over micro-batches (and, after the all-reduce, over workers).
struct TaskStats {
    double loss_sum = 0;
    double weight_sum = 0;
    double tokens = 0;
    std::vector<double> correct;  // [P] per accuracy position
    std::vector<double> count;    // [P]
    std::vector<double> extra;    // [WorkerTask::extra_stats_size()]: the task's own sums
};

// The model-specific part of a run; one instance per worker, owning that worker's replica on the
// worker's device.
class WorkerTask {
  public:
    virtual ~WorkerTask() = default;
    virtual ParamSet& params() = 0;  // training (gradients allocated)
    // Accuracy positions P: B-1 block positions for a drafter, 1 (next token) for a target.
    virtual int64_t num_positions() const = 0;
    // Accuracy position p is loss_stats position p + stats_offset() (drafters: block position
    // k = p + 1, since k = 0 is the anchor); loss_stats runs with period P + stats_offset().
    virtual int64_t stats_offset() const = 0;
    // Whether StepRecord::tau_implied means something (drafters).
    virtual bool reports_tau() const = 0;
    // What StepRecord::loss is (train.loss as LossMix::name gives it), written to metrics.jsonl.
    virtual std::string loss_kind() const { return "ce"; }
    // Sums of the task's own beyond LossStatsLayout (DFlash2: the selector's), kept on the device
    // right after the loss stats, downloaded and all-reduced with them.
    virtual int64_t extra_stats_size() const { return 0; }
    // Completes a record whose loss (the loss stats' sum / weight_sum) and acc are set from the
    // global extra sums: DFlash2 adds alpha x the selector loss to r.loss and its metrics.
    virtual void add_extra_metrics(const std::vector<double>& /*extra*/, double /*weight_sum*/,
                                   StepRecord& /*r*/) const {}
    // Fills mb.anchors (drawing from rng) and mb.weight; runs before any forward.
    virtual void prepare(MicroBatch& mb, Rng& rng) const = 0;
    // The largest micro-batch a step can see (max_length tokens, every anchor): the trainer runs
    // it dry once to size the worker's workspace.
    virtual MicroBatch largest_batch(int64_t max_length) const = 0;
    // Forward (+ backward when params have gradients, accumulating grad_scale * d(sum w CE)),
    // adding loss and per-position accuracy into stats (f32 on the device; LossStatsLayout, then
    // extra_stats_size() sums of the task's own).
    // Memory from ws (reset by the caller between micro-batches).
    // What, besides the run's fixed settings, decides the device work of run() for mb: the
    // recorded step's key (Backend::run_step). By default the sequence length and anchor count.
    virtual std::vector<int64_t> step_shape(const MicroBatch& mb) const {
        return {static_cast<int64_t>(mb.seq.tokens.size()),
                static_cast<int64_t>(mb.anchors.size())};
    }
    virtual void run(Backend& be, Workspace& ws, const MicroBatch& mb, float grad_scale,
                     const Tensor& stats) = 0;
    // Whether run() may be recorded as a step (Backend::run_step): false when it reads device
    // results on the host in the middle (DSpark's confidence loss), so it runs eagerly.
    virtual bool recordable() const { return true; }
    // Writes the model in its HF layout (bf16) plus the tokenizer description into dir.
    virtual void save_model(const std::filesystem::path& dir) const = 0;
    // save_model in two halves, so that checkpoints are written while training goes on: copies
    // the replica's weights (f32 masters) into host memory now and returns that copy's params
    // and what writes save_model's files from it, which the checkpoint writer runs later on its
    // own thread. The copy is the task's model on `host` (a ModelSnapshotCopy), made by
    // reserve_snapshot once, at setup, and refilled by every call (made only once the previous
    // write is done). Note [Checkpoint snapshot memory] in train/checkpoint_writer.h.
    struct ModelSnapshot {
        const ParamSet* params = nullptr;
        std::function<void(const std::filesystem::path&)> save;
    };
    virtual void reserve_snapshot(Backend& host) = 0;
    virtual ModelSnapshot snapshot_model() = 0;
    // Evaluation only, right after run() of mb without gradients (outside any recorded step):
    // the micro-batch's acceptance sums (drafters' greedy and probabilistic tau, from each block
    // row's argmax and TV distance kept on the device by run()); nullopt for tasks without.
    virtual std::optional<AcceptanceSums> eval_acceptance(Backend& /*be*/,
                                                          const MicroBatch& /*mb*/) {
        return std::nullopt;
    }
    // Real speculative decoding of held-out prompts with the current weights (drafters given
    // prompts); run by worker 0 at each evaluation when TrainerSpec::eval_decoding is set.
    virtual std::optional<DecodeEval> decode_eval(Backend& /*be*/) { return std::nullopt; }
};

// Callbacks for progress UIs, the demo and tests.
struct TrainHooks {
    // Worker 0, after every optimizer step and every evaluation.
    std::function<void(const StepRecord&)> on_record;
    // Every worker, at the start of every step before any work (tests inject failures here).
    std::function<void(int worker, int64_t step)> on_step_begin;
    // Every worker, right after on_step_begin, with its replica's weights (tests make them
    // non-finite here to exercise the divergence error).
    std::function<void(int worker, int64_t step, ParamSet& params)> on_step_weights;
    // Ctrl-C / SIGTERM: checkpoint at the next step boundary and stop. run_trainer arms a
    // SignalWatcher for the run that requests the stop on `stop` (or on one of its own).
    bool handle_signals = true;
    // Where stop requests land, when the caller owns them: the CLI arms its watcher on it before
    // any thread starts (then handle_signals is false); tests request stops on it. Null: the run
    // makes its own.
    StopSource* stop = nullptr;
    bool progress = true;  // a redrawn progress line on stdout when it is a terminal
    // The checkpoint writer's thread, before it writes the checkpoint directory `dir` (tests
    // inject write failures and slow writes here).
    std::function<void(const std::filesystem::path& dir)> on_checkpoint_write;
};

struct TrainSummary {
    std::filesystem::path run_dir;
    std::filesystem::path model_dir;  // the last checkpoint (an HF model directory)
    std::filesystem::path metrics_path;
    int64_t first_step = 0;  // the first step run by this call (resume: checkpoint step + 1)
    int64_t steps = 0;       // the last step done
    int64_t total_steps = 0;
    double first_loss = 0;
    double final_loss = 0;
    std::vector<double> acc;  // of the last step
    double tau_implied = 0;
    double seconds = 0;
    bool interrupted = false;              // stopped early by a stop request
    int stop_signal = 0;                   // the signal that stopped it (SIGINT, SIGTERM), or 0
    std::optional<StepRecord> final_eval;  // final_eval->decode: real tau on held-out prompts
    int process = 0;    // launch.rank: only process 0 writes checkpoints and metrics
    int processes = 1;  // launch.world_size
};

// What run_trainer needs from run_drafter_training / run_pretraining.
struct TrainerSpec {
    std::string kind;  // "drafter" or "target", recorded in checkpoints
    const ShardedDataset* train_data = nullptr;
    const ShardedDataset* eval_data = nullptr;  // may be null
    // Evaluations also decode held-out prompts (WorkerTask::decode_eval on worker 0); they run
    // when eval_data or this is set.
    bool eval_decoding = false;
    int64_t max_length = 0;
    double lr = 0;
    int64_t epochs = 1;
    int64_t max_steps = 0;  // 0 = from epochs
    // A fresh replica for worker w on backend be (worker w's device) with the initial weights
    // (identical for every w).
    std::function<std::unique_ptr<WorkerTask>(int worker, Backend& be)> make_task;
    std::filesystem::path run_dir;
    // The lock of run_dir when the caller took it (lock_run_dir) before loading models; else
    // run_trainer takes it.
    const DirLock* run_dir_lock = nullptr;
    std::optional<std::filesystem::path> resume_from;  // a checkpoint directory
    TrainHooks hooks;
};

// Locks spec.run_dir (core/dir_lock.h: a second writer is refused with this process's pid),
// validates a resume completely (kind, worker count, steps, every worker's data position, the
// training-state tensors) before anything in the run directory changes, then trains.
// `options` are what it runs with; `settings`, the snapshot they were read from, is recorded in
// the run directory (settings.toml) and in every checkpoint (with its hash), and compared across
// the processes of a multi-process run.
TrainSummary run_trainer(const TrainerSpec& spec, const TrainingOptions& options,
                         const config::Settings& settings, const Logger& log);

// The data loader options of worker `rank` of a run: max_length, data.pack, data.shuffle,
// runtime.seed and runtime.devices (the world).
LoaderOptions training_loader_options(const TrainingOptions& options, int64_t max_length, int rank);

// The SignalWatcher callback of a run: logs the signal and requests a stop on `stop`.
std::function<void(int signal)> stop_on_signal(StopSource& stop, const Logger& log);

// The held-out data of a run: `given`, else `setting` (train.eval_data); none when both are empty.
std::optional<ShardedDataset> open_eval_data(const std::filesystem::path& given,
                                             const std::filesystem::path& setting);

}  // namespace dflash::train

// A training worker (see worker.h). Note [Worker-invariant loss] is in trainer.h. Tested by
// tests/train/trainer_test.cpp, eval_decode_test.cpp, divergence_test.cpp,
// optimizer_shard_test.cpp and signal_test.cpp.
#include "train/worker.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "backend/backend_factory.h"
#include "config/dump.h"
#include "core/error.h"
#include "data/anchors.h"
#include "train/best_checkpoint.h"
#include "train/checkpoint_writer.h"
#include "train/gradient_exchange.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace dflash::train {
namespace {

namespace fs = std::filesystem;

// Salts that separate the random streams derived from runtime.seed.
constexpr uint64_t kAnchorSalt = 0xa9c40a11ull;
constexpr uint64_t kEvalSalt = 0xe7a1ull;

// Switches a ParamSet's gradients off for its lifetime, so that forwards compute no backward.
class GradsOff {
  public:
    explicit GradsOff(ParamSet& ps) : ps_(ps) { ps_.set_grads_on(false); }
    ~GradsOff() { ps_.set_grads_on(true); }
    GradsOff(const GradsOff&) = delete;
    GradsOff& operator=(const GradsOff&) = delete;

  private:
    ParamSet& ps_;
};

std::vector<double> pack_stats(const TaskStats& st) {
    std::vector<double> v = {st.loss_sum, st.weight_sum, st.tokens};
    v.insert(v.end(), st.correct.begin(), st.correct.end());
    v.insert(v.end(), st.count.begin(), st.count.end());
    v.insert(v.end(), st.extra.begin(), st.extra.end());
    return v;
}

TaskStats unpack_stats(const std::vector<double>& v, int64_t P) {
    TaskStats st;
    st.loss_sum = v[0];
    st.weight_sum = v[1];
    st.tokens = v[2];
    st.correct.assign(v.begin() + 3, v.begin() + 3 + P);
    st.count.assign(v.begin() + 3 + P, v.begin() + 3 + 2 * P);
    st.extra.assign(v.begin() + 3 + 2 * P, v.end());
    return st;
}

// "loss 2.1034 acc@1 0.412 tau~1.71 | decode tau 1.52 over 8 prompts (120 steps, 3.1s)"
std::string eval_line(const StepRecord& r) {
    std::string out;
    if (r.has_loss) {
        out = fmt::format("loss {:.4f} acc@1 {:.3f}", r.loss, r.acc.empty() ? 0.0 : r.acc.front());
        if (r.tau_implied > 0) out += fmt::format(" tau~{:.2f}", r.tau_implied);
        if (r.tau_greedy > 0) out += fmt::format(" tau_greedy {:.3f}", r.tau_greedy);
        if (r.tau_prob > 0) out += fmt::format(" tau_prob {:.3f}", r.tau_prob);
        if (r.selector) out += " " + selector_summary(*r.selector);
    }
    if (r.decode) {
        if (!out.empty()) out += " | ";
        out += fmt::format("decode tau {:.2f} over {} prompts ({} steps, {:.1f}s)", r.decode->tau(),
                           r.decode->prompts, r.decode->steps, r.decode->seconds);
    }
    return out;
}

std::vector<double> accuracies(const TaskStats& st) {
    std::vector<double> acc(st.correct.size());
    for (size_t k = 0; k < acc.size(); ++k)
        acc[k] = st.count[k] > 0 ? st.correct[k] / st.count[k] : 0.0;
    return acc;
}

class Worker {
  public:
    Worker(Shared& sh, WorkerContext& ctx)
        : sh_(sh),
          ctx_(ctx),
          comm_(sh.group.local(ctx.id())),
          rank_(sh.group.global_rank(ctx.id())),
          local_(ctx.id()) {}
    ~Worker() {
        if (exchange_ && exchange_->device()) sh_.remove_collectives(exchange_->device());
    }
    Worker(const Worker&) = delete;
    Worker& operator=(const Worker&) = delete;
    void run();

  private:
    void run_steps();
    void setup();
    bool train_step(int64_t step);  // true when the workers agreed to stop
    // Every worker's weights hash the same, or the run stops naming the workers that differ.
    void check_replicas(int64_t step);
    // Runs one micro-batch into the stats tensor, the workspace reset first; `reduce`: the
    // step's last, whose backward also sums the gradients bucket by bucket.
    void run_batch(const MicroBatch& mb, float grad_scale, const Tensor& stats,
                   const GradientExchange::BucketedBackward* sum = nullptr);
    // The stats tensor's sums as TaskStats (tokens left 0).
    TaskStats stats_from(const float* stats) const;
    void evaluate(int64_t step);
    void evaluate_heldout(StepRecord& r);
    void checkpoint(int64_t step);
    // train.keep_best: every worker, after an evaluation; writes <run>/best/ when r beats best_.
    void keep_best(const StepRecord& r);
    TrainingState gathered_state(int64_t step);
    void report(const StepRecord& r);
    double elapsed() const {
        return std::chrono::duration<double>(Clock::now() - sh_.start).count();
    }

    Shared& sh_;
    WorkerContext& ctx_;
    Communicator& comm_;
    int rank_;   // in the run (global)
    int local_;  // in this process
    std::unique_ptr<Backend> be_;
    // The run's first worker: the host memory its checkpoints are copied into (Note [Checkpoint
    // snapshot memory] in checkpoint_writer.h). Before task_, whose copy of the weights lives on
    // its host backend.
    std::optional<CheckpointMemory> ckpt_mem_;
    // Declared before step_owner_ so that the graphs holding its collectives are gone before its
    // communicators are destroyed.
    std::unique_ptr<GradientExchange> exchange_;
    std::optional<StepOwner> step_owner_;  // the worker's recorded steps
    std::unique_ptr<WorkerTask> task_;
    std::unique_ptr<PackedLoader> loader_;
    std::unique_ptr<AdamW> opt_;
    std::optional<LrSchedule> sched_;
    Workspace ws_;
    LossStatsLayout layout_;
    int64_t stats_size_ = 0;  // layout_.size() + the task's extra sums
    // [stats_size_ + 3] on the device: the step's loss/accuracy sums (and the task's own), then
    // the gradient norm², the clipping factor and (sharded) the tail's norm²; downloaded once per
    // step into step_host_.
    DeviceTensor step_out_;
    HostTensor step_host_;
    int64_t start_step_ = 0;
    int64_t last_ckpt_ = -1;
    std::optional<double> best_;  // train.keep_best: the value to beat (best.json on resume)
    double step_seconds_ = 0;     // sum over this call's steps (for the ETA)
    // The run's first worker writes the checkpoints, in the background. Last, so that it is
    // destroyed first: a write in flight finishes before the task's snapshot it reads goes.
    std::optional<CheckpointWriter> writer_;
};

void Worker::setup() {
    GraphOptions graphs = sh_.opt.graphs;
    graphs.warn = [this](const std::string& m) { sh_.log.warn("{}", m); };
    be_ = make_backend(sh_.opt.backend, worker_device(sh_.opt, local_), sh_.opt.threads, graphs);
    step_owner_.emplace(*be_);
    task_ = sh_.spec.make_task(rank_, *be_);
    ctx_.set_phase("setting up the gradient exchange");
    const LoopOptions& o = sh_.opt;
    exchange_ = std::make_unique<GradientExchange>(
        *be_, comm_, task_->params(),
        ExchangeOptions{o.gradient_exchange, o.nccl_library, o.collective_timeout_s, o.bucket_mb,
                        o.shard_optimizer},
        sh_.log);
    if (exchange_->device()) sh_.add_collectives(exchange_->device());
    DF_ASSERT(task_->params().training(), "a training replica needs gradients");
    loader_ = std::make_unique<PackedLoader>(*sh_.spec.train_data,
                                             loader_options(sh_.spec.max_length, sh_.opt, rank_));
    opt_ = std::make_unique<AdamW>(task_->params(), sh_.opt.adamw, exchange_->shard());
    sched_.emplace(sh_.opt.schedule, sh_.spec.lr, sh_.total_steps, sh_.opt.warmup_ratio);
    layout_ = LossStatsLayout{task_->num_positions() + task_->stats_offset()};
    stats_size_ = layout_.size() + task_->extra_stats_size();
    step_out_ = DeviceTensor(*be_, {stats_size_ + 3}, DType::f32);
    step_host_ = HostTensor({stats_size_ + 3});
    // The workspace of the largest micro-batch, measured by running it dry.
    ctx_.set_phase("planning the step's memory");
    const MicroBatch largest = task_->largest_batch(sh_.spec.max_length);
    const Tensor stats = step_out_.view().rows(0, stats_size_);
    WorkspacePlan plan = plan_workspace(
        *be_, [&](Backend& pb, Workspace& pws) { task_->run(pb, pws, largest, 1.0f, stats); });
    {
        // An evaluation's forward keeps what training's backward does not (the teacher's
        // distribution for tau_prob, whatever the loss).
        GradsOff no_grads(task_->params());
        plan.merge(plan_workspace(
            *be_, [&](Backend& pb, Workspace& pws) { task_->run(pb, pws, largest, 0.0f, stats); }));
    }
    ws_ = Workspace(*be_, plan);
    if (rank_ == 0) {
        // Every run ends with a checkpoint: its memory is made now, so that no step waits for
        // the allocation (pinning 12 bytes a parameter takes seconds on CUDA).
        ctx_.set_phase("allocating the checkpoints' host memory");
        const auto t0 = Clock::now();
        ckpt_mem_.emplace(*be_, task_->params().numel());
        task_->reserve_snapshot(*ckpt_mem_->host);
        sh_.log.debug("checkpoint memory: {:.2f} GB of host memory on {} in {:.1f} s",
                      3.0 * 4e-9 * static_cast<double>(task_->params().numel()), be_->name(),
                      std::chrono::duration<double>(Clock::now() - t0).count());
    }
    if (sh_.resume) {
        const TrainingState& rs = *sh_.resume;
        loader_->set_state(sh_.resume_loaders[static_cast<size_t>(rank_)]);
        load_optimizer_state(*sh_.spec.resume_from, rs.step, task_->params(), *opt_);
        start_step_ = last_ckpt_ = rs.step;
        // The best value found in this run directory so far, when it was of this metric.
        if (sh_.opt.keep_best)
            if (const auto b = read_best(sh_.spec.run_dir); b && b->metric == sh_.opt.best_metric)
                best_ = b->value;
    }
}

void Worker::run_batch(const MicroBatch& mb, float grad_scale, const Tensor& stats,
                       const GradientExchange::BucketedBackward* sum) {
    ws_.reset();
    ws_.settle_inputs();
    // One recorded step per micro-batch shape: everything else it reads is staged (tokens,
    // anchors, the gradient weights that carry grad_scale) or fixed for the run. Evaluation
    // (no gradients) is a step of its own, and so is a last micro-batch that sums.
    ParamSet& params = task_->params();
    StepKey key{step_owner_->id(),
                !params.has_grads() ? "eval.microbatch"
                : sum != nullptr    ? "train.microbatch.sum"
                                    : "train.microbatch",
                task_->step_shape(mb)};
    key.dims.push_back(address_of(stats));
    const auto step = [&] {
        const auto backward = [&] { task_->run(*be_, ws_, mb, grad_scale, stats); };
        if (sum != nullptr)
            (*sum)(backward);
        else
            backward();
    };
    // A task that reads device results on the host mid-step runs eagerly.
    if (task_->recordable())
        be_->run_step(key, step);
    else
        step();
}

TaskStats Worker::stats_from(const float* s) const {
    TaskStats st;
    st.loss_sum = s[LossStatsLayout::kLossSum];
    st.weight_sum = s[LossStatsLayout::kWeightSum];
    const int64_t P = task_->num_positions(), off = task_->stats_offset();
    for (int64_t p = 0; p < P; ++p) {
        st.correct.push_back(s[layout_.correct(p + off)]);
        st.count.push_back(s[layout_.count(p + off)]);
    }
    st.extra.assign(s + layout_.size(), s + stats_size_);
    return st;
}

void Worker::run() {
    try {
        run_steps();
    } catch (...) {
        // This worker gives up: its collectives stop first, so that no wait of the clean-up
        // (its recorded steps are released, its stream drained) waits for peers.
        if (exchange_) exchange_->stop();
        throw;
    }
}

void Worker::run_steps() {
    setup();
    if (sh_.opt.world > 1) check_replicas(start_step_);  // every replica starts from one state
    for (int64_t step = start_step_ + 1; step <= sh_.total_steps; ++step) {
        ctx_.set_phase(fmt::format("step {}", step));
        // A checkpoint write that failed stops the run here, at the next step.
        if (writer_) writer_->check();
        const TrainHooks& hooks = sh_.spec.hooks;
        if (hooks.on_step_begin) hooks.on_step_begin(rank_, step);
        if (hooks.on_step_weights) hooks.on_step_weights(rank_, step, task_->params());
        const bool stop = train_step(step);
        const int64_t rc = sh_.opt.replica_check_every;
        if (sh_.opt.world > 1 && (step == start_step_ + 1 || (rc > 0 && step % rc == 0)))
            check_replicas(step);
        const bool last = step == sh_.total_steps;
        const int64_t ee = sh_.opt.eval_every;
        const bool can_eval = sh_.spec.eval_data || sh_.spec.eval_decoding;
        if (can_eval && ((ee > 0 && step % ee == 0) || (last && !stop))) evaluate(step);
        const int64_t ce = sh_.opt.checkpoint_every;
        if (stop || last || (ce > 0 && step % ce == 0)) checkpoint(step);
        if (stop) {
            if (local_ == 0) sh_.summary.interrupted = true;
            break;
        }
    }
    if (writer_) {
        ctx_.set_phase("writing the last checkpoint");
        writer_->wait();
    }
    if (rank_ == 0 && sh_.tty && sh_.spec.hooks.progress) std::fputs("\n", stdout);
    if (const GraphStats gs = be_->graph_stats(); gs.enabled)
        sh_.log.info("{} {}", be_->name(), gs.summary());
    // The allocator's own count (parameters, optimizer state, workspace, the target): what a
    // memory figure from nvidia-smi has on top of it is the CUDA context and the libraries' own.
    if (const MemoryCounters mc = be_->memory_counters(); mc.peak_bytes > 0)
        sh_.log.info("{} memory: peak {:.2f} GiB ({:.2f}e9 bytes) by the allocator's count",
                     be_->name(), static_cast<double>(mc.peak_bytes) / (1 << 30),
                     static_cast<double>(mc.peak_bytes) / 1e9);
}

bool Worker::train_step(int64_t step) {
    const auto t0 = Clock::now();
    const LoopOptions& o = sh_.opt;
    std::vector<MicroBatch> mbs(static_cast<size_t>(o.batch * o.accumulation));
    double w_local = 0, tokens = 0;
    for (MicroBatch& mb : mbs) {
        mb.seq = loader_->next();
        const LoaderState ls = loader_->state();
        // The index of this sequence in the epoch's global order: the same whatever the layout.
        const auto g = static_cast<uint64_t>((ls.cursor - 1) * o.world + rank_);
        Rng rng = sequence_anchor_rng(o.seed ^ kAnchorSalt, ls.epoch, g);
        task_->prepare(mb, rng);
        w_local += mb.weight;
        tokens += static_cast<double>(mb.seq.tokens.size());
    }
    double w = w_local;
    comm_.all_reduce_sum(&w, 1);
    ParamSet& params = task_->params();
    params.zero_grads();
    const int64_t S = stats_size_;
    const Tensor out = step_out_.view();
    const Tensor stats = out.rows(0, S), norm_sq = out.rows(S, S + 1),
                 clip = out.rows(S + 1, S + 2), tail_sq = out.rows(S + 2, S + 3);
    be_->fill(out, 0.0f);
    const float scale = w > 0 ? static_cast<float>(1.0 / w) : 0.0f;
    // The update's learning rate and bias corrections go to the device first (the previous step
    // ended with a download, so this waits for nothing).
    const double lr = sched_->lr(step);
    if (w > 0) opt_->begin_step(*be_, lr);
    size_t last = mbs.size();  // the last micro-batch this worker runs
    for (size_t i = 0; i < mbs.size(); ++i)
        if (mbs[i].weight > 0) last = i;
    GradientExchange::StepWork work;
    work.micro_batches = [&](const GradientExchange::BucketedBackward* sum_last) {
        for (size_t i = 0; i < mbs.size(); ++i)
            if (mbs[i].weight > 0) run_batch(mbs[i], scale, stats, i == last ? sum_last : nullptr);
    };
    // Norm, clipping factor and update stay on the device; the host learns them with the stats.
    // One recorded step: the learning rate and bias corrections are read from device memory.
    work.recorded_update = [&](const std::function<void()>& body) {
        be_->run_step(StepKey{step_owner_->id(), w > 0 ? "train.update" : "train.norm", {}}, body);
    };
    work.update = [&] {
        be_->clip_scale(norm_sq, static_cast<float>(o.grad_clip), clip);
        if (w > 0) opt_->apply(*be_, params, clip);
    };
    if (opt_->gathers_updates()) work.finish_update = [&] { opt_->finish_muon(*be_, params); };
    work.norm_sq = norm_sq;
    work.tail_sq = tail_sq;
    work.updates = w > 0;
    exchange_->run_step(params, work);
    if (w <= 0 && rank_ == 0)
        sh_.log.warn("step {}: no token carries loss weight; update skipped", step);
    be_->download(step_host_.view(), out);

    TaskStats st = stats_from(step_host_.f32());
    st.tokens = tokens;
    std::vector<double> packed = pack_stats(st);
    packed.push_back(ctx_.stop_requested() ? 1.0 : 0.0);
    comm_.all_reduce_sum(packed.data(), packed.size());
    const bool stop = packed.back() > 0;
    packed.pop_back();
    const int64_t P = task_->num_positions();
    const TaskStats g = unpack_stats(packed, P);
    StepRecord r;
    r.loss = w > 0 ? g.loss_sum / w : 0.0;
    r.acc = accuracies(g);
    task_->add_extra_metrics(g.extra, w, r);
    const double loss = r.loss;
    DF_CHECK(std::isfinite(loss),
             "the loss is {} at step {}: training diverged (lower train.lr "
             "or raise train.warmup_ratio); the last checkpoint is intact",
             loss, step);
    const double norm = std::sqrt(static_cast<double>(step_host_.f32()[S]));
    DF_CHECK(std::isfinite(norm),
             "the gradient norm is {} at step {}; the last checkpoint is "
             "intact",
             norm, step);

    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    step_seconds_ += secs;
    r.step = step;
    r.total_steps = sh_.total_steps;
    r.epoch = loader_->state().epoch;
    r.loss_kind = task_->loss_kind();
    if (task_->reports_tau()) r.tau_implied = implied_tau(r.acc);
    r.lr = lr;
    r.grad_norm = norm;
    r.tokens_per_s = secs > 0 ? g.tokens / secs : 0;
    r.elapsed_s = elapsed();
    if (const GraphStats gs = be_->graph_stats(); gs.enabled) r.graphs = gs;
    r.eta_s = step_seconds_ / static_cast<double>(step - start_step_) *
              static_cast<double>(sh_.total_steps - step);
    report(r);
    return stop;
}

// FNV-1a 64 of a replica's fp32 weights (the masters when the compute copy is bf16).
uint64_t weights_hash(Backend& be, const ParamSet& ps) {
    const Tensor w = ps.flat_master();
    std::vector<float> host;
    const float* p = nullptr;
    if (w.device().kind == DeviceKind::cpu) {
        p = w.f32();
    } else {
        host.resize(static_cast<size_t>(w.numel()));
        be.download(Tensor(host.data(), DType::f32, w.shape()), w);
        p = host.data();
    }
    return config::fnv1a64(std::string_view(reinterpret_cast<const char*>(p),
                                            static_cast<size_t>(w.numel()) * sizeof(float)));
}

void Worker::check_replicas(int64_t step) {
    ctx_.set_phase(fmt::format("replica check at step {}", step));
    const uint64_t h = weights_hash(*be_, task_->params());
    // Gathered by a sum: each worker fills its own two slots (32 bits each, exact in a double).
    const auto W = static_cast<size_t>(sh_.opt.world);
    std::vector<double> all(2 * W, 0.0);
    all[2 * static_cast<size_t>(rank_)] = static_cast<double>(h >> 32);
    all[2 * static_cast<size_t>(rank_) + 1] = static_cast<double>(h & 0xffffffffull);
    comm_.all_reduce_sum(all.data(), all.size());
    std::vector<int> differ;
    for (size_t r = 1; r < W; ++r)
        if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) differ.push_back(static_cast<int>(r));
    DF_CHECK(differ.empty(),
             "at step {} the weights of worker(s) {} differ from worker 0's: the replicas "
             "have diverged (a nondeterministic kernel, or a lost gradient exchange); the last "
             "checkpoint is intact",
             step, fmt::join(differ, ", "));
}

// Eval sequence i of the held-out set: the epoch-0 packing of a single-worker loader, read
// directly so that each worker reads only its own sequences.
Sequence read_eval_sequence(const ShardedDataset& ds, const PackedLoader& plan, int64_t i) {
    Sequence seq;
    const auto max_len = static_cast<size_t>(plan.options().max_length);
    for (int64_t id : plan.sequence_samples(0, i)) {
        Encoded s = ds.sample(id);
        const size_t len = std::min(s.tokens.size(), max_len);
        seq.sample_starts.push_back(static_cast<int32_t>(seq.tokens.size()));
        seq.tokens.insert(seq.tokens.end(), s.tokens.begin(), s.tokens.begin() + len);
        seq.loss_mask.insert(seq.loss_mask.end(), s.loss_mask.begin(), s.loss_mask.begin() + len);
    }
    return seq;
}

void Worker::evaluate(int64_t step) {
    ctx_.set_phase(fmt::format("evaluation at step {}", step));
    StepRecord r;
    r.eval = true;
    r.step = step;
    r.total_steps = sh_.total_steps;
    r.epoch = loader_->state().epoch;
    r.has_loss = sh_.spec.eval_data != nullptr;
    r.loss_kind = task_->loss_kind();
    if (r.has_loss) evaluate_heldout(r);
    // Decoding is sequential per prompt and cheap next to training, so worker 0 does it alone;
    // the others wait in the next step's first collective.
    if (sh_.spec.eval_decoding && rank_ == 0) r.decode = task_->decode_eval(*be_);
    r.elapsed_s = elapsed();
    report(r);
    keep_best(r);
}

void Worker::evaluate_heldout(StepRecord& r) {
    const ShardedDataset& ds = *sh_.spec.eval_data;
    LoaderOptions lo = loader_options(sh_.spec.max_length, sh_.opt, 0);
    lo.world = 1;
    const PackedLoader plan(ds, lo);
    int64_t n = plan.sequences_per_epoch();
    if (sh_.opt.eval_sequences > 0) n = std::min(n, sh_.opt.eval_sequences);
    const int64_t P = task_->num_positions();
    const Tensor stats = step_out_.view().rows(0, stats_size_);
    be_->fill(stats, 0.0f);
    // The loss is normalised by the weights known before the forward, as in training (with
    // D-PACE those differ from the weights the stats sum).
    double weight_sum = 0;
    AcceptanceSums acc;
    bool has_acc = false;
    {
        GradsOff no_grads(task_->params());
        for (int64_t i = rank_; i < n; i += sh_.opt.world) {
            MicroBatch mb;
            mb.seq = read_eval_sequence(ds, plan, i);
            // Fixed anchors: the same for every evaluation of the run and every worker layout
            // (drawn from runtime.seed and the sequence's index in the held-out set only).
            Rng rng = Rng(sh_.opt.seed ^ kEvalSalt).fork(static_cast<uint64_t>(i));
            task_->prepare(mb, rng);
            weight_sum += mb.weight;
            if (mb.weight <= 0) continue;
            run_batch(mb, 0.0f, stats);
            if (const auto a = task_->eval_acceptance(*be_, mb)) {
                acc.blocks += a->blocks;
                acc.greedy_run += a->greedy_run;
                acc.prob_run += a->prob_run;
                acc.has_prob = acc.has_prob || a->has_prob;
                acc.dspark.add(a->dspark);
                has_acc = true;
            }
        }
    }
    be_->download(step_host_.view().rows(0, stats_size_), stats);
    TaskStats st = stats_from(step_host_.f32());
    st.weight_sum = weight_sum;
    std::vector<double> packed = pack_stats(st);
    // The acceptance sums travel with the stats (a worker without sequences adds zeros).
    std::vector<double> acc_sums = {acc.blocks, acc.greedy_run, acc.prob_run,
                                    acc.has_prob ? 1.0 : 0.0, has_acc ? 1.0 : 0.0};
    // DSpark's metric sums (zeros for other drafters): P slots, the same on every worker.
    const std::vector<double> ds_sums = acc.dspark.pack(P);
    acc_sums.insert(acc_sums.end(), ds_sums.begin(), ds_sums.end());
    packed.insert(packed.end(), acc_sums.begin(), acc_sums.end());
    comm_.all_reduce_sum(packed.data(), packed.size());
    AcceptanceSums all;
    const size_t at = packed.size() - acc_sums.size();
    all.blocks = packed[at];
    all.greedy_run = packed[at + 1];
    all.prob_run = packed[at + 2];
    all.has_prob = packed[at + 3] > 0;
    const bool any_acc = packed[at + 4] > 0;
    all.dspark = DsparkMetricSums::unpack(std::span<const double>(packed).subspan(at + 5), P);
    packed.resize(at);
    const TaskStats g = unpack_stats(packed, P);
    r.loss = g.weight_sum > 0 ? g.loss_sum / g.weight_sum : 0.0;
    r.acc = accuracies(g);
    task_->add_extra_metrics(g.extra, g.weight_sum, r);
    if (task_->reports_tau()) r.tau_implied = implied_tau(r.acc);
    if (any_acc) {
        r.tau_greedy = all.tau_greedy();
        r.tau_prob = all.tau_prob();
        r.dspark = all.dspark.metrics();
    }
}

void Worker::checkpoint(int64_t step) {
    if (step == last_ckpt_) return;
    ctx_.set_phase(fmt::format("checkpoint at step {}", step));
    TrainingState s = gathered_state(step);
    // The step waits only for the previous write (if it is still going: its memory is refilled
    // here) and for the copy of the state into host memory; the files are written while training
    // goes on (Note [Checkpoint snapshot memory] in checkpoint_writer.h).
    if (rank_ == 0) {
        if (!writer_) writer_.emplace(sh_.log);
        writer_->wait();
    }
    const auto t0 = Clock::now();
    const Tensor m = rank_ == 0 ? ckpt_mem_->m.view() : Tensor();
    const Tensor v = rank_ == 0 ? ckpt_mem_->v.view() : Tensor();
    exchange_->gather_moments(*opt_, m, v);
    if (rank_ == 0) {
        WorkerTask::ModelSnapshot snap = task_->snapshot_model();
        sh_.summary.model_dir = sh_.spec.run_dir / checkpoint_name(step);
        writer_->submit({.run_dir = sh_.spec.run_dir,
                         .state = std::move(s),
                         .params = snap.params,
                         .save_model = std::move(snap.save),
                         .m = m,
                         .v = v,
                         .copy_seconds = std::chrono::duration<double>(Clock::now() - t0).count(),
                         .before_write = sh_.spec.hooks.on_checkpoint_write});
    }
    comm_.barrier();
    last_ckpt_ = step;
}

// The training state of a checkpoint at `step`: every worker's data position, gathered by a sum
// (a collective: every worker calls it), and the run's settings. Filled the same on every worker.
TrainingState Worker::gathered_state(int64_t step) {
    const int W = sh_.opt.world;
    std::vector<double> states(static_cast<size_t>(2 * W), 0.0);
    states[2 * rank_] = static_cast<double>(loader_->state().epoch);
    states[2 * rank_ + 1] = static_cast<double>(loader_->state().cursor);
    comm_.all_reduce_sum(states.data(), states.size());
    TrainingState s;
    s.kind = sh_.spec.kind;
    s.step = step;
    s.total_steps = sh_.total_steps;
    s.epoch = loader_->state().epoch;
    for (int w = 0; w < W; ++w)
        s.loaders.push_back(
            {static_cast<int64_t>(states[2 * w]), static_cast<int64_t>(states[2 * w + 1])});
    s.seed = sh_.opt.seed;
    s.anchor_seed = sh_.opt.seed ^ kAnchorSalt;
    s.settings_toml = config::dump_toml(sh_.settings);
    s.settings_hash = sh_.settings.hash();
    s.data = sh_.data;
    return s;
}

// Note [Best checkpoint]: the metric comes from the all-reduced evaluation sums, so every worker
// takes the same decision and joins the moments' gather; worker 0 writes <run>/best/
// (best_checkpoint.h). Only a strictly better value replaces it.
void Worker::keep_best(const StepRecord& r) {
    if (!sh_.opt.keep_best || !r.has_loss) return;
    const double value = sh_.opt.best_metric == "tau_prob" ? r.tau_prob : r.tau_greedy;
    if (!(value > 0) || (best_ && value <= *best_)) return;
    ctx_.set_phase(fmt::format("best checkpoint at step {}", r.step));
    const TrainingState s = gathered_state(r.step);
    // Memory of its own: the checkpoint writer may still be reading CheckpointMemory's.
    const int64_t n = task_->params().numel();
    const HostTensor m = rank_ == 0 ? HostTensor({n}) : HostTensor();
    const HostTensor v = rank_ == 0 ? HostTensor({n}) : HostTensor();
    exchange_->gather_moments(*opt_, m, v);
    if (rank_ == 0) {
        const fs::path dir =
            write_best(sh_.spec.run_dir, {sh_.opt.best_metric, value, r.step}, s, task_->params(),
                       m, v, [this](const fs::path& d) { task_->save_model(d); });
        sh_.log.info("best {} {:.4f} (was {}): {}", sh_.opt.best_metric, value,
                     best_ ? fmt::format("{:.4f}", *best_) : std::string("none"), dir.string());
    }
    comm_.barrier();
    best_ = value;
}

void Worker::report(const StepRecord& r) {
    // Every process keeps its summary (its command prints it); the run's first worker alone
    // writes metrics.jsonl, the log lines and the progress line.
    if (local_ != 0) return;
    const bool writer = rank_ == 0;
    TrainSummary& sum = sh_.summary;
    const bool first = !r.eval && r.step == start_step_ + 1;
    const bool last = r.step == sh_.total_steps;
    if (r.eval) {
        sum.final_eval = r;
        if (!writer) return;
        if (sh_.tty && sh_.spec.hooks.progress) std::fputs("\n", stdout);
        sh_.log.info("eval @ step {}: {}", r.step, eval_line(r));
    } else {
        if (first) {
            sum.first_step = r.step;
            sum.first_loss = r.loss;
        }
        sum.steps = r.step;
        sum.final_loss = r.loss;
        sum.acc = r.acc;
        sum.tau_implied = r.tau_implied;
    }
    if (!writer) return;
    const bool logged = r.eval || first || last || r.step % sh_.opt.log_every == 0;
    if (logged) sh_.metrics->append(r);
    if (!r.eval) {
        if (sh_.tty && sh_.spec.hooks.progress) {
            std::fprintf(stdout, "\r%s\033[K", progress_line(r).c_str());
            std::fflush(stdout);
        } else if (logged) {
            sh_.log.info("{}", progress_line(r));
        }
    }
    if (sh_.spec.hooks.on_record) sh_.spec.hooks.on_record(r);
}

}  // namespace

void run_worker(Shared& sh, WorkerContext& ctx) {
    Worker w(sh, ctx);
    w.run();
}

}  // namespace dflash::train

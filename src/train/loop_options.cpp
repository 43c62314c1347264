// The training loop's options (see loop_options.h). Tested by tests/train/trainer_test.cpp and
// tests/train/data_order_test.cpp.
#include "train/loop_options.h"

#include <unistd.h>

#include <algorithm>

#include "backend/backend_factory.h"
#include "core/error.h"

namespace dflash::train {

MuonConfig muon_config(const TrainOptions& tr) {
    MuonConfig m;
    m.enabled = tr.optimizer == "muon";
    DF_CHECK(m.enabled || tr.optimizer == "adamw", "train.optimizer={} (expected adamw or muon)",
             tr.optimizer);
    // Muon's lr follows the schedule as AdamW's does: its peak is train.muon_lr (default 10 x
    // train.lr), so the ratio of the two is what the optimizer keeps.
    DF_CHECK(tr.muon_lr == 0 || tr.lr > 0,
             "train.muon_lr={} needs train.lr > 0 (Muon's lr follows the schedule as a multiple of "
             "train.lr)",
             tr.muon_lr);
    m.lr_ratio = tr.muon_lr > 0 ? tr.muon_lr / tr.lr : 10.0;
    m.weight_decay = tr.muon_weight_decay;
    m.ns_steps = tr.muon_ns_steps;
    DF_CHECK(tr.muon_adjust_lr == "match_rms_adamw" || tr.muon_adjust_lr == "original",
             "train.muon_adjust_lr={} (expected match_rms_adamw or original)", tr.muon_adjust_lr);
    m.adjust =
        tr.muon_adjust_lr == "original" ? MuonLrAdjust::original : MuonLrAdjust::match_rms_adamw;
    return m;
}

LoopOptions loop_options(const TrainingOptions& t) {
    const RuntimeOptions& rt = t.runtime;
    const TrainOptions& tr = t.train;
    LoopOptions o;
    o.workers = static_cast<int>(rt.devices);
    o.launch = t.launch;
    o.world = o.workers * o.launch.world;
    const auto cores = static_cast<int64_t>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
    o.threads =
        static_cast<int>(rt.threads > 0 ? rt.threads : std::max<int64_t>(1, cores / o.workers));
    o.backend = resolve_backend(rt.backend, o.workers);
    o.graphs = t.graphs;
    o.batch = tr.batch_size;
    o.accumulation = tr.accumulation;
    o.grad_clip = tr.grad_clip;
    o.adamw = {tr.beta1, tr.beta2, tr.adam_eps, tr.weight_decay, muon_config(tr)};
    o.schedule = tr.schedule;
    o.warmup_ratio = tr.warmup_ratio;
    o.log_every = tr.log_every;
    o.eval_every = tr.eval_every;
    o.eval_sequences = tr.eval_sequences;
    o.keep_best = tr.keep_best;
    o.best_metric = tr.best_metric;
    o.checkpoint_every = tr.checkpoint_every;
    o.replica_check_every = tr.replica_check_every;
    o.gradient_exchange = rt.gradient_exchange;
    o.nccl_library = rt.nccl_library;
    o.collective_timeout_s = rt.collective_timeout_s;
    o.bucket_mb = rt.gradient_bucket_mb;
    for (int64_t id : rt.device_ids) {
        DF_CHECK(std::find(o.device_ids.begin(), o.device_ids.end(), id) == o.device_ids.end(),
                 "runtime.device_ids names device {} twice: one worker per device", id);
        o.device_ids.push_back(static_cast<int>(id));
    }
    DF_CHECK(o.device_ids.empty() || static_cast<int>(o.device_ids.size()) == o.workers,
             "runtime.device_ids names {} device(s) but runtime.devices is {}: give one device "
             "per worker",
             o.device_ids.size(), o.workers);
    o.shard_optimizer = tr.shard_optimizer_state;
    o.seed = rt.seed;
    o.packing = t.data.pack;
    o.shuffle = t.data.shuffle;
    return o;
}

// The device of local worker w: runtime.device_ids[w], else its place on the node.
int worker_device(const LoopOptions& o, int w) {
    return o.device_ids.empty() ? node_device_index(o.launch, o.workers, w)
                                : o.device_ids[static_cast<size_t>(w)];
}

LoaderOptions loader_options(int64_t max_length, const LoopOptions& o, int rank) {
    LoaderOptions lo;
    lo.max_length = max_length;
    lo.packing = o.packing;
    lo.shuffle = o.shuffle;
    lo.seed = o.seed;
    lo.rank = rank;
    lo.world = o.world;
    lo.drop_last = false;
    return lo;
}

}  // namespace dflash::train

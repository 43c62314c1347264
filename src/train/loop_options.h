// What the training loop runs with (LoopOptions): the runtime.*, train.*, data.* and launch.*
// values the loop and its workers use (from the command's TrainingOptions), and what follows from
// them (the worker count of the run, each worker's threads and device, its data loader's options).
// Tested by tests/train/trainer_test.cpp and tests/train/data_order_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/step_graph.h"
#include "comm/launch.h"
#include "data/dataset.h"
#include "train/optimizer.h"
#include "train/schedule.h"
#include "train/train_options.h"

namespace dflash::train {

struct LoopOptions {
    int workers = 1;  // in this process
    int world = 1;    // in the run: workers x launch.world_size processes
    Launch launch;
    DeviceKind backend = DeviceKind::cpu;
    int threads = 1;  // per worker (CPU backend)
    GraphOptions graphs;
    int64_t batch = 1;
    int64_t accumulation = 1;
    double grad_clip = 0;
    AdamWConfig adamw;
    ScheduleKind schedule = ScheduleKind::cosine;
    double warmup_ratio = 0;
    int64_t log_every = 1;
    int64_t eval_every = 0;
    int64_t eval_sequences = 0;
    bool keep_best = false;                  // train.keep_best
    std::string best_metric = "tau_greedy";  // train.best_metric
    int64_t checkpoint_every = 0;
    int64_t replica_check_every = 0;
    std::string gradient_exchange = "auto";
    std::string nccl_library;
    double collective_timeout_s = 600;
    double bucket_mb = 64;
    std::vector<int> device_ids;  // runtime.device_ids: [workers], or empty
    bool shard_optimizer = false;
    uint64_t seed = 0;
    bool packing = true;
    bool shuffle = true;
};

// The loop's options from a command's: runtime.threads 0 shares the cores among the workers,
// runtime.backend is resolved for runtime.devices workers, runtime.device_ids must name one
// distinct device per worker.
LoopOptions loop_options(const TrainingOptions& t);
// train.optimizer and the train.muon_* values as the optimizer takes them.
MuonConfig muon_config(const TrainOptions& tr);

// The device of local worker w: runtime.device_ids[w], else its place on the node.
int worker_device(const LoopOptions& o, int w);

// The data loader options of worker `rank` of the run (the run's order: data.pack, data.shuffle,
// runtime.seed, the world of workers).
LoaderOptions loader_options(int64_t max_length, const LoopOptions& o, int rank);

}  // namespace dflash::train

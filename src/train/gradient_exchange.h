// GradientExchange: how one training worker's gradients meet the other workers' (docs/training.md
// "Several GPUs"), owned by that worker and driven by its thread. Through the host (the worker's
// Communicator: download, rank-order sum, upload), or on the devices
// (Backend::make_device_collectives: NCCL on GPUs), then in buckets beside the backward (Note
// [Gradient buckets]) or in one sum inside the recorded update; with train.shard_optimizer_state,
// the reduce-scatter / all-gather of Note [Optimizer-state sharding] around an AdamW that updates
// this worker's FlatShard only. Tested by tests/train/trainer_test.cpp, optimizer_shard_test.cpp,
// gradient_bucket_test.cpp and, on GPUs, tests/cuda/nccl_cuda_test.cpp and
// scripts/multi-gpu-check.sh.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/logging.h"
#include "model/params.h"
#include "train/optimizer.h"

namespace dflash::train {

struct ExchangeOptions {
    std::string how = "host";  // runtime.gradient_exchange: auto | device | host
    std::string nccl_library;  // runtime.nccl_library
    double timeout_s = 600;    // runtime.collective_timeout_s
    double bucket_mb = 64;     // runtime.gradient_bucket_mb (0: one sum after the backward)
    bool shard = false;        // train.shard_optimizer_state
};

class GradientExchange {
  public:
    // Every worker of the run constructs its own at the same time: the device collectives are
    // made together. `params` (training) fixes the flat sizes.
    GradientExchange(Backend& be, Communicator& comm, const ParamSet& params,
                     const ExchangeOptions& o, const Logger& log);
    GradientExchange(const GradientExchange&) = delete;
    GradientExchange& operator=(const GradientExchange&) = delete;

    // The device collectives, or null when the gradients go through the host.
    DeviceCollectives* device() const { return device_.get(); }
    // What this worker's optimizer updates (everything, unsharded).
    const FlatShard& shard() const { return shard_; }
    bool bucketed() const { return !buckets_.empty(); }

    // Runs a backward with the gradients summed in buckets as it finishes them.
    using BucketedBackward = std::function<void(const std::function<void()>& backward)>;

    // What a worker does in one optimizer step, which the exchange interleaves with its sums.
    struct StepWork {
        // Runs the step's micro-batches (forward and backward). `sum_last`, when not null
        // (bucketed()), must run the backward of the worker's last micro-batch, inside that
        // micro-batch's recorded step.
        std::function<void(const BucketedBackward* sum_last)> micro_batches;
        // Runs `body` as the step's recorded update (Backend::run_step).
        std::function<void(const std::function<void()>& body)> recorded_update;
        // Inside the recorded update, once norm_sq holds the summed gradients' squared norm:
        // clipping and the optimizer's update of shard().
        std::function<void()> update;
        // Sharded Muon (AdamW::gathers_updates; Note [Sharded Muon] in optimizer.cpp), else
        // empty: the rest of the update, once every worker's chunk of the gradients (which
        // `update` overwrote with Muon's updates) is gathered; inside the recorded update on the
        // devices, after it through the host.
        std::function<void()> finish_update;
        Tensor norm_sq;       // f32 [1] (device)
        Tensor tail_sq;       // f32 [1] (device), scratch
        bool updates = true;  // false (no token carried weight): nothing to gather afterwards
    };
    // One optimizer step's exchange, the whole protocol in its order: the micro-batches (the last
    // backward summing in buckets); the rest of the sum (through the host, or the buckets a
    // worker without micro-batches has not sent); inside the recorded update the device sum (or
    // reduce-scatter) and the norm, then `update`, then (sharded, on the devices) the gather;
    // after it (sharded, through the host) the gather.
    void run_step(ParamSet& params, const StepWork& work);

  private:
    // ---- run_step's parts, in its order --------------------------------------------------------
    void begin_step() { sent_ = 0; }
    // Runs the backward of the step's last micro-batch (bucketed(); inside its recorded step)
    // with a listener on params that sends each bucket as the backward finishes it, then sends
    // the rest and joins them.
    void backward_with_buckets(ParamSet& params, const std::function<void()>& backward);
    // After the micro-batches, outside any recorded step: the host sum (no device collectives),
    // or the buckets a worker that ran no micro-batch of its own has not sent.
    void after_backward(ParamSet& params);
    // Inside the recorded update, before clipping: the device-side sum (unless it went in
    // buckets) or reduce-scatter, and norm_sq f32 [1] = the summed gradients' squared norm.
    // tail_sq f32 [1] is scratch.
    void sum_and_norm(ParamSet& params, const Tensor& norm_sq, const Tensor& tail_sq);
    // After the optimizer updated this worker's shard (sharded only; no-ops otherwise): the
    // other chunks gathered, inside the recorded update (device collectives) or after it
    // (through the host), then the compute copy refreshed.
    void gather_in_step(ParamSet& params);
    void gather_after_step(ParamSet& params);
    // Every worker's chunk of the flat f32 `flat` [numel] into every worker's copy, through the
    // host: one broadcast per worker (sharded only).
    void broadcast_chunks(const Tensor& flat);

  public:
    // Every AdamW moment into m and v, f32 [numel] in host memory on worker 0 (empty tensors
    // elsewhere: every worker takes part, worker 0 alone receives), for a checkpoint. Waits for
    // the device. Unsharded, one download each (at the bus's speed into pinned memory, Note
    // [Checkpoint snapshot memory] in train/checkpoint_writer.h).
    void gather_moments(const AdamW& opt, const Tensor& m, const Tensor& v);
    // This worker gives up (its step failed): its device collectives stop first.
    void stop() {
        if (device_) device_->stop();
    }

  private:
    void send_buckets_from(int64_t lo, const ParamSet& params);
    void host_sum(const ParamSet& params);

    Backend& be_;
    Communicator& comm_;
    ExchangeOptions o_;
    FlatShard shard_;
    std::unique_ptr<DeviceCollectives> device_;
    // Note [Gradient buckets]: with device collectives and runtime.gradient_bucket_mb > 0, the
    // flat gradients in ranges [lo, hi) from the top down, each summed (overlapped) as soon as
    // the last micro-batch's backward has finished it. Every worker has the same ranges and
    // sends them in the same order, during its backward or, with no micro-batch of its own
    // this step, after it.
    std::vector<std::pair<int64_t, int64_t>> buckets_;
    size_t sent_ = 0;
    std::vector<float> host_grads_;   // the host sum's staging when the device is not the host
    std::vector<float> host_chunks_;  // sharded: broadcast_chunks' staging
};

}  // namespace dflash::train

// A worker's gradient exchange (see gradient_exchange.h). Tested by tests/train/trainer_test.cpp,
// optimizer_shard_test.cpp and gradient_bucket_test.cpp.
#include "train/gradient_exchange.h"

#include <algorithm>

#include "core/error.h"

namespace dflash::train {

// Note [Optimizer-state sharding] (train.shard_optimizer_state; ZeRO stage 1). Worker r keeps
// the AdamW moments of, and updates, FlatShard r of the flat parameters: its chunk and the
// small common tail. On the devices, inside the recorded update: the gradients' chunks are
// reduce-scattered and the tail all-reduced; the norm² is the all-reduced sum of the chunks'
// plus the tail's (so it rounds differently from the whole-buffer norm: equal to float
// rounding, not bitwise); each worker updates its chunk and the tail, the chunks' masters are
// all-gathered and the compute copy refreshed. Through the host (runtime.gradient_exchange=host,
// and CPU workers by default), the gradients are summed whole as without sharding, so the norm
// and every update are bitwise those of an unsharded run, and the updated chunks travel by one
// broadcast per worker. Checkpoints hold every moment (gathered on worker 0), so a run resumes
// sharded or not, with any number of workers. Buckets are not used with sharding. Muon adds a
// gather of its updates between the two halves of its step (Note [Sharded Muon] in
// optimizer.cpp).
GradientExchange::GradientExchange(Backend& be, Communicator& comm, const ParamSet& params,
                                   const ExchangeOptions& o, const Logger& log)
    : be_(be), comm_(comm), o_(o) {
    const int world = comm.size(), rank = comm.rank();
    const int64_t numel = params.numel();
    shard_ = o.shard && world > 1 ? FlatShard::of(numel, world, rank) : FlatShard::whole(numel);
    // CPU workers sum through the host either way; `device` runs them through the backend's
    // collectives (the host communicator again), which exercises the device-side paths.
    const bool cpu = be.device().kind == DeviceKind::cpu;
    if (world > 1 && o.how != "host" && (!cpu || o.how == "device")) {
        try {
            device_ =
                be.make_device_collectives(comm, CollectiveOptions{o.nccl_library, o.timeout_s});
        } catch (const Error& e) {
            // Every worker loads the same library, so they all come here alike and none is left
            // waiting in NCCL's set-up.
            if (o.how == "device") throw;
            if (rank == 0)
                log.warn("gradients go through the host: {} (runtime.gradient_exchange=auto)",
                         e.what());
        }
        DF_CHECK(device_ || o.how != "device",
                 "runtime.gradient_exchange=device but the {} backend cannot sum on the device",
                 be.name());
        if (device_ && rank == 0)
            log.info("gradients summed on the devices: {}", device_->describe());
    }
    if (device_ && !shard_.sharded() && o.bucket_mb > 0) {
        const int64_t align = FlatShard::kAlign;
        const auto size = std::max<int64_t>(
            align, static_cast<int64_t>(o.bucket_mb * (1 << 20) / 4) / align * align);
        for (int64_t hi = numel; hi > 0;) {
            const int64_t lo = std::max<int64_t>(0, hi - size) / align * align;
            buckets_.emplace_back(lo, hi);
            hi = lo;
        }
        if (rank == 0)
            log.info("gradients summed in {} bucket(s) of up to {:.0f} MiB beside the backward",
                     buckets_.size(), static_cast<double>(size) * 4 / (1 << 20));
    }
    if (o.shard && rank == 0) {
        const double mib = 8.0 / (1 << 20);  // two f32 moments
        log.info(
            "optimizer state sharded over {} workers: each keeps the AdamW moments of {} of the "
            "{} parameters ({:.1f} MiB instead of {:.1f})",
            world, shard_.owned(), numel, mib * static_cast<double>(shard_.owned()),
            mib * static_cast<double>(numel));
    }
}

void GradientExchange::run_step(ParamSet& params, const StepWork& work) {
    begin_step();
    const BucketedBackward sum_last = [&](const std::function<void()>& backward) {
        backward_with_buckets(params, backward);
    };
    work.micro_batches(bucketed() ? &sum_last : nullptr);
    // Through the host the sum waits for the device; on the devices it is part of the recorded
    // update (or of the last micro-batch's, in buckets), so each worker's graphs hold it.
    after_backward(params);
    const bool finish = work.updates && work.finish_update && shard_.sharded();
    work.recorded_update([&] {
        sum_and_norm(params, work.norm_sq, work.tail_sq);
        work.update();
        if (finish && device_) {
            device_->all_gather(params.flat_grads().rows(0, shard_.tail()), shard_.chunk);
            work.finish_update();
        }
        if (work.updates) gather_in_step(params);
    });
    if (finish && !device_) {
        broadcast_chunks(params.flat_grads());
        work.finish_update();
    }
    if (work.updates) gather_after_step(params);
}

void GradientExchange::backward_with_buckets(ParamSet& params,
                                             const std::function<void()>& backward) {
    sent_ = 0;  // also when a failed capture runs the step again eagerly
    params.set_grads_final_listener([this, &params](int64_t lo) { send_buckets_from(lo, params); });
    struct Unlisten {
        ParamSet& params;
        ~Unlisten() { params.set_grads_final_listener(nullptr); }
    } unlisten{params};
    backward();
    send_buckets_from(0, params);
    device_->join();
}

void GradientExchange::after_backward(ParamSet& params) {
    if (!device_) {
        host_sum(params);
        return;
    }
    if (bucketed() && sent_ < buckets_.size()) {  // no micro-batch of this worker's summed
        send_buckets_from(0, params);
        device_->join();
    }
}

void GradientExchange::sum_and_norm(ParamSet& params, const Tensor& norm_sq,
                                    const Tensor& tail_sq) {
    const Tensor grads = params.flat_grads();
    if (!device_ || !shard_.sharded()) {
        if (device_ && !bucketed() && comm_.size() > 1) device_->sum(grads);
        grad_norm_sq(be_, params, norm_sq);
        return;
    }
    device_->reduce_scatter(grads.rows(0, shard_.tail()), shard_.chunk);
    be_.sum_squares(shard_chunk(grads, shard_), norm_sq);
    device_->sum(norm_sq);
    if (shard_.tail() < shard_.numel) {
        const Tensor tail = shard_tail(grads, shard_);
        device_->sum(tail);
        be_.sum_squares(tail, tail_sq);
        be_.add_inplace(norm_sq, tail_sq);
    }
}

void GradientExchange::gather_in_step(ParamSet& params) {
    if (!shard_.sharded() || !device_) return;
    device_->all_gather(params.flat_master().rows(0, shard_.tail()), shard_.chunk);
    params.sync_values_from_master();
}

void GradientExchange::gather_after_step(ParamSet& params) {
    if (!shard_.sharded() || device_) return;
    broadcast_chunks(params.flat_master());
    params.sync_values_from_master();
}

void GradientExchange::broadcast_chunks(const Tensor& flat) {
    const int64_t c = shard_.chunk, n = shard_.tail();
    const bool host_memory = flat.device().kind == DeviceKind::cpu;
    float* all = flat.f32();
    if (!host_memory) {
        host_chunks_.resize(static_cast<size_t>(n));
        all = host_chunks_.data();
        be_.download(Tensor(all + shard_.begin(), DType::f32, {c}), shard_chunk(flat, shard_));
    }
    for (int r = 0; r < comm_.size(); ++r)
        comm_.broadcast(all + r * c, static_cast<size_t>(c) * sizeof(float), r);
    if (!host_memory) be_.upload(flat.rows(0, n), Tensor(all, DType::f32, {n}));
}

void GradientExchange::gather_moments(const AdamW& opt, const Tensor& all_m, const Tensor& all_v) {
    const int rank = comm_.rank();
    const int64_t n = shard_.numel, c = shard_.chunk, owned = shard_.owned();
    if (rank == 0) {
        DF_ASSERT(all_m.numel() == n && all_v.numel() == n &&
                      all_m.device().kind == DeviceKind::cpu &&
                      all_v.device().kind == DeviceKind::cpu,
                  "gather_moments: host tensors of {} elements expected, got {} and {}", n,
                  all_m.describe(), all_v.describe());
    }
    if (!shard_.sharded()) {
        // Every worker holds every moment: worker 0's are the ones written.
        if (rank == 0) {
            be_.download(all_m, opt.m());
            be_.download(all_v, opt.v());
        }
        return;
    }
    const HostTensor m = to_host_f32(be_, opt.m()), v = to_host_f32(be_, opt.v());
    if (rank == 0) {
        // The tail is every worker's alike.
        copy_tensor(shard_tail(all_m, shard_), m.view().rows(c, owned));
        copy_tensor(shard_tail(all_v, shard_), v.view().rows(c, owned));
    }
    // Each worker's chunk in pieces of at most 16M floats per moment, so the staging stays small.
    const int64_t piece = std::min<int64_t>(c, int64_t{1} << 24);
    std::vector<float> buf(static_cast<size_t>(2 * piece));
    for (int r = 0; r < comm_.size(); ++r) {
        for (int64_t off = 0; off < c; off += piece) {
            const int64_t len = std::min(piece, c - off);
            if (rank == r) {
                std::copy_n(m.f32() + off, len, buf.data());
                std::copy_n(v.f32() + off, len, buf.data() + len);
            }
            comm_.broadcast(buf.data(), static_cast<size_t>(2 * len) * sizeof(float), r);
            if (rank == 0) {
                std::copy_n(buf.data(), len, all_m.f32() + r * c + off);
                std::copy_n(buf.data() + len, len, all_v.f32() + r * c + off);
            }
        }
    }
}

void GradientExchange::send_buckets_from(int64_t lo, const ParamSet& params) {
    const Tensor grads = params.flat_grads();
    for (; sent_ < buckets_.size() && buckets_[sent_].first >= lo; ++sent_)
        device_->sum_overlapped(grads.rows(buckets_[sent_].first, buckets_[sent_].second));
}

void GradientExchange::host_sum(const ParamSet& params) {
    const Tensor grads = params.flat_grads();
    const auto n = static_cast<size_t>(grads.numel());
    if (comm_.size() == 1) return;
    if (grads.device().kind == DeviceKind::cpu) {
        comm_.all_reduce_sum(grads.f32(), n);
        return;
    }
    host_grads_.resize(n);
    be_.download(Tensor(host_grads_.data(), DType::f32, grads.shape()), grads);
    comm_.all_reduce_sum(host_grads_.data(), n);
    be_.upload(grads, Tensor(host_grads_.data(), DType::f32, grads.shape()));
}

}  // namespace dflash::train

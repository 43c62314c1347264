// Backend: one device's memory, ordering and op set (docs/design.md "The op contract"). Model,
// training and decoding code is written once against it and never dereferences activation memory on
// the host: it uploads a step's inputs once and downloads its small outputs once
// (backend/workspace.h). Implementations: the CPU reference (backend/cpu, fp32, runs immediately),
// CUDA (backend/cuda, bf16 storage, fp32 accumulation, ordered on the device's stream) and the
// planning backend (no work at all: it sizes workspaces). All tensors are row-major and contiguous.
// The op set is declared once, in backend/op_list.h, with each op's contract; shapes are checked by
// backend/op_shapes.h; a tensor of another device is an error naming it.
// Tested through the CPU backend by tests/ops/*_test.cpp and every model test; the CUDA backend
// against the CPU one by tests/cuda/*_test.cpp.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/device_tensor.h"
#include "backend/memory_counter.h"
#include "backend/ops.h"
#include "backend/step_graph.h"
#include "core/tensor.h"

namespace dflash {

class Communicator;

// Collectives over the workers of a run done by the devices themselves
// (Backend::make_device_collectives): NCCL on CUDA. Every op is queued on the backend's stream
// like any other (it may be recorded in a step) and works in place on f32 tensors; every worker
// of the run must call the same ops with the same sizes in the same order.
class DeviceCollectives {
  public:
    virtual ~DeviceCollectives() = default;
    // Every worker ends with the element-wise sum.
    virtual void sum(const Tensor& t) = 0;
    // t [world * chunk]: afterwards worker r's chunk [r * chunk, (r + 1) * chunk) holds the sum
    // of every worker's chunk r; the rest of t is unspecified.
    virtual void reduce_scatter(const Tensor& t, int64_t chunk) = 0;
    // t [world * chunk]: every worker ends with worker r's chunk r at [r * chunk, (r + 1) * chunk).
    virtual void all_gather(const Tensor& t, int64_t chunk) = 0;
    // sum(t) on a stream of the collectives' own, after the work queued so far on the backend's
    // stream: the backend's later work runs beside it (a backward pass beside the sum of the
    // gradients it has finished) until join(), after which the backend's stream waits for
    // every overlapped sum. Sums run in the order they were queued, like every other op.
    virtual void sum_overlapped(const Tensor& t) = 0;
    virtual void join() = 0;
    // From any thread: this worker's device stops waiting for its peers. The wait in progress,
    // or the next one, fails with `reason` after aborting the collectives (a failed worker must
    // not leave the others hanging, docs/design.md "Errors").
    virtual void abort(const std::string& reason) = 0;
    // From the driving thread, when it gives up on its own (its step failed): stops every
    // collective queued or running now, so that no wait on the device during the clean-up is
    // left waiting for peers; later ops fail.
    virtual void stop() = 0;
    virtual std::string describe() const = 0;  // "NCCL 2.28.9, 2 ranks"
};

// How a backend's device collectives are made (runtime.nccl_library,
// runtime.collective_timeout_s).
struct CollectiveOptions {
    std::string library;
    // The longest a host wait on the device may take while collectives are in flight (their
    // set-up included) before they are aborted and the wait fails naming the cause.
    double timeout_s = 600;
};

// A backend's own copy of a linear layer's weight, made by Backend::prepare_bf16_weight or
// Backend::prepare_f32_weight for Backend::linear. It holds the weight's values as they were when
// it was made.
class PreparedWeight {
  public:
    virtual ~PreparedWeight() = default;
};

class Backend {
  public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;  // "cpu", "cuda:0", "planning(cuda:0)"
    virtual DeviceRef device() const = 0;
    // Storage type of activations and of the weights' compute copy: f32 on the CPU, bf16 on CUDA.
    // Parameter gradients, optimizer moments, norms' rstd and attention lse are always f32.
    virtual DType compute_dtype() const = 0;

    // ---- memory (setup time only: never inside a step or a graph capture) -------------------
    // Zero-filled device memory.
    virtual Buffer allocate(size_t bytes) = 0;
    // Host memory the device copies from and to fastest (pinned on CUDA).
    virtual Buffer allocate_host(size_t bytes) = 0;
    // A CPU backend whose memory is this backend's allocate_host (zero-filled): host copies of
    // this device's state kept between uses, such as the checkpoint snapshot (Note [Checkpoint
    // snapshot memory] in train/checkpoint_writer.h), so that downloads into them run at the
    // bus's speed rather than through pageable memory. On the CPU, a plain CPU backend. Call it
    // from the thread that drives this backend, which must outlive it and its buffers.
    virtual std::unique_ptr<Backend> make_host_backend(int threads);
    // The bytes of this backend's live allocate() buffers (parameters, optimizer state,
    // workspaces, caches) now and at most since it was made or since reset_peak_memory(). Not
    // counted: the CUDA backend's fixed op workspace (cuda_backend.h) and cuBLASLt's.
    virtual MemoryCounters memory_counters() const { return {}; }
    virtual void reset_peak_memory() {}

    // ---- ordering and transfers -----------------------------------------------------------------
    // Copies host memory into a device tensor (same dtype and element count). The host source
    // must stay unchanged until the work queued so far has finished (synchronize).
    virtual void upload(const Tensor& dst, const Tensor& src_host) = 0;
    // Copies a device tensor into host memory and waits for it (and for all work before it).
    virtual void download(const Tensor& dst_host, const Tensor& src) = 0;
    // Copies on the device (copy, copy_columns, fill, write_rows) are ops: backend/op_list.h.
    // Waits until every operation queued on this backend has finished.
    virtual void synchronize() = 0;

    // ---- replayable steps (docs/engine.md, backend/step_graph.h) --------------------------------
    // Runs `record` as the step `key`. The CUDA backend runs it eagerly GraphOptions::warmup_runs
    // times, then records it into a CUDA graph and from then on replays the graph: `record` is
    // still called every time (its host code stages inputs into pinned memory), but its ops are
    // not queued, the graph's are. So within `record`: no allocate, download or synchronize; an
    // upload only from pinned memory (Workspace inputs), each input in its own place for the whole
    // step; and every host value an op takes (shapes, addresses, scalars) either fixed for the
    // key or read from device memory. A capture that fails leaves the device usable and runs
    // `record` eagerly (counted, told once; see GraphCache). Other backends call `record`.
    virtual void run_step(const StepKey& key, const std::function<void()>& record) { record(); }
    // True inside run_step while a graph is being captured or replayed (Workspace refuses to reuse
    // staging memory then).
    virtual bool recording_step() const { return false; }
    // A fresh owner for step keys (StepOwner) and the end of one: its graphs are dropped.
    virtual uint64_t new_step_owner() { return 0; }
    virtual void release_steps(uint64_t owner) { (void)owner; }
    // This device's graph-cache counters (enabled false where there is no graph cache).
    virtual GraphStats graph_stats() const { return {}; }

    // Collectives over the workers of a run done by the devices themselves (NCCL on CUDA), queued
    // on this backend's stream like an op: no host synchronisation. `host` is this worker's host
    // communicator (it carries the setup, e.g. NCCL's unique id, and every worker of the run must
    // call this together). While they live, this backend's host waits (download, synchronize)
    // are bounded by opt.timeout_s and end at DeviceCollectives::abort. Null where the backend
    // has none: the caller then sums through the host.
    virtual std::unique_ptr<DeviceCollectives> make_device_collectives(
        Communicator& host, const CollectiveOptions& opt) {
        (void)host;
        (void)opt;
        return nullptr;
    }

    // ---- the op set: backend/op_list.h, one entry per op with its contract ----------------------
#define DFLASH_OP_DEFAULT(value) = value
#define DFLASH_OP(name, params, args) virtual void name params = 0;
#include "backend/op_list.h"

    // ---- ops each backend does its own way ------------------------------------------------------
    // A bf16 copy of the weight w [N, K] for linear(), for products that may trade precision for
    // speed (drafting: Note [bf16 drafting] in backend/cpu/bf16_linear.h), or null where this
    // backend has no faster bf16 product than gemm (CUDA, whose gemm is bf16 already; a CPU
    // without AVX-512). Setup time only: it allocates.
    virtual std::unique_ptr<PreparedWeight> prepare_bf16_weight(const Tensor& w) {
        (void)w;
        return nullptr;
    }
    // An fp32 copy of the weight w [N, K] for linear(), laid out for products of a few rows whose
    // bits do not depend on the row count (the target's decode and verify: Note [f32 panels] in
    // backend/cpu/f32_panels.h), or null where this backend reads w in place as fast (CUDA; a CPU
    // without AVX2). Setup time only: it allocates.
    virtual std::unique_ptr<PreparedWeight> prepare_f32_weight(const Tensor& w) {
        (void)w;
        return nullptr;
    }
    // y = x · Wᵀ + beta * y: from `prepared` when it is not null (this backend's
    // prepare_bf16_weight or prepare_f32_weight of w), else gemm(x, false, w, true, y, 1, beta). x
    // viewed as [M, K].
    virtual void linear(const Tensor& x, const Tensor& w, const PreparedWeight* prepared,
                        const Tensor& y, float beta = 0.0f) {
        (void)prepared;
        gemm(x, false, w, true, y, 1.0f, beta);
    }
    // The f32 elements of LmHeadCeOut::workspace / LmHeadKlOut::workspace for R rows, dim D,
    // vocabulary V and chunk (each backend keeps its own per-chunk temporaries there).
    virtual int64_t lm_head_ce_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                         int64_t chunk) const = 0;
    virtual int64_t lm_head_kl_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                         int64_t chunk) const = 0;
};

// An owner of step keys for as long as it lives: a session or worker whose buffers stay put holds
// one, keys its steps with id(), and its graphs are dropped when it goes (their addresses may be
// reused by the next allocation).
class StepOwner {
  public:
    explicit StepOwner(Backend& be) : be_(&be), id_(be.new_step_owner()) {}
    ~StepOwner() {
        if (be_) be_->release_steps(id_);
    }
    StepOwner(StepOwner&& o) noexcept : be_(o.be_), id_(o.id_) { o.be_ = nullptr; }
    StepOwner& operator=(StepOwner&&) = delete;
    StepOwner(const StepOwner&) = delete;
    StepOwner& operator=(const StepOwner&) = delete;
    uint64_t id() const { return id_; }

  private:
    Backend* be_;
    uint64_t id_;
};

// A tensor's address as a StepKey dim (0 for an empty tensor).
inline int64_t address_of(const Tensor& t) {
    return static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data()));
}

// Indices into the stats tensor of Backend::loss_stats for accuracy period P.
struct LossStatsLayout {
    int64_t period = 1;
    static constexpr int64_t kLossSum = 0;
    static constexpr int64_t kWeightSum = 1;
    int64_t correct(int64_t k) const { return 2 + k; }
    int64_t count(int64_t k) const { return 2 + period + k; }
    int64_t size() const { return 2 + 2 * period; }
};

// Inverse frequencies [Dh/2] of NeoX RoPE with the Qwen3/Llama rope_scaling variants, in float32
// like the HF reference.
std::vector<float> rope_inv_freq(const RopeConfig& cfg, int64_t head_dim);

std::unique_ptr<Backend> make_cpu_backend(int threads);
// A CPU backend whose allocations are taken from `memory` (given the byte count, rounded up to
// 256; the backend zero-fills it): Backend::make_host_backend on CUDA, tests.
using HostMemorySource = std::function<Buffer(size_t bytes)>;
std::unique_ptr<Backend> make_cpu_backend(int threads, HostMemorySource memory);
// A backend that checks nothing and does nothing, reporting `real`'s device and compute dtype:
// step code run against it with a planning Workspace measures the workspace a step needs.
std::unique_ptr<Backend> make_planning_backend(const Backend& real);

}  // namespace dflash

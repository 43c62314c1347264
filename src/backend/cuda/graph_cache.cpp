// GraphCache (graph_cache.h). Host code. Tested by tests/cuda/graph_cuda_test.cpp.
#include "backend/cuda/graph_cache.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <chrono>
#include <exception>

#include "backend/cuda/cuda_check.h"

namespace dflash::cuda {
namespace {

cudaStreamCaptureMode capture_mode(CaptureMode m) {
    switch (m) {
        case CaptureMode::this_thread:
            return cudaStreamCaptureModeThreadLocal;
        case CaptureMode::global:
            return cudaStreamCaptureModeGlobal;
        case CaptureMode::relaxed:
            return cudaStreamCaptureModeRelaxed;
    }
    return cudaStreamCaptureModeThreadLocal;
}

// The part of an error message that names the cause, without the shapes and addresses that make
// every occurrence unique (counters are kept by reason).
std::string reason_of(const std::string& what) {
    const size_t cut = what.find(" (");
    std::string r = what.substr(0, std::min<size_t>(cut, 160));
    return r.empty() ? "unknown" : r;
}

}  // namespace

// Puts the backend in a mode for the life of one record call.
class ModeScope {
  public:
    ModeScope(const std::function<void(StepMode)>& set, StepMode m) : set_(set) { set_(m); }
    ~ModeScope() { set_(StepMode::eager); }
    ModeScope(const ModeScope&) = delete;
    ModeScope& operator=(const ModeScope&) = delete;

  private:
    const std::function<void(StepMode)>& set_;
};

GraphCache::GraphCache(GraphOptions opt, CUstream_st* stream, int device, std::string device_name,
                       std::function<void(StepMode)> set_mode)
    : opt_(std::move(opt)),
      stream_(stream),
      device_(device),
      device_name_(std::move(device_name)),
      set_mode_(std::move(set_mode)) {
    stats_.enabled = opt_.enabled;
}

GraphCache::~GraphCache() {
    for (auto& [key, e] : entries_) destroy(e);
}

void GraphCache::destroy(Entry& e) {
    if (!e.exec) return;
    // The graph may still be running: its launches finish before it goes.
    (void)cudaStreamSynchronize(stream_);
    (void)cudaGraphExecDestroy(e.exec);
    e.exec = nullptr;
}

void GraphCache::run(const StepKey& key, const std::function<void()>& record) {
    if (!opt_.enabled) {
        ++stats_.eager_runs;
        record();
        return;
    }
    if (entries_.size() >= kTrimAt && !entries_.contains(key)) trim();
    Entry& e = entries_[key];
    e.last_use = ++clock_;
    if (e.exec) {
        {
            const ModeScope replaying(set_mode_, StepMode::replaying);
            record();  // its host part: staged inputs
        }
        DF_CUDA_CHECK(cudaGraphLaunch(e.exec, stream_));
        ++stats_.replays;
        return;
    }
    if (e.stays_eager || e.eager_runs < opt_.warmup_runs) {
        ++e.eager_runs;
        ++stats_.eager_runs;
        record();
        return;
    }
    std::string reason;
    if (capture(e, record, reason)) {
        DF_CUDA_CHECK(cudaGraphLaunch(e.exec, stream_));
        ++stats_.replays;
        return;
    }
    // Nothing of the failed capture ran: the step runs eagerly now.
    if (e.failures == 1 && opt_.warn)
        opt_.warn(fmt::format(
            "{}: capturing step '{}' failed ({}); it runs eagerly{}", device_name_, key.phase,
            reason,
            opt_.max_rerecords > 0
                ? fmt::format(" and capture is retried up to {} more time(s)", opt_.max_rerecords)
                : ""));
    if (e.failures > opt_.max_rerecords) {
        e.stays_eager = true;
        ++stats_.fallback_reasons[reason_of(reason)];
    } else {
        ++stats_.rerecord_reasons[reason_of(reason)];
    }
    ++stats_.eager_runs;
    record();
}

bool GraphCache::capture(Entry& e, const std::function<void()>& record, std::string& reason) {
    int live = 0;
    for (const auto& [k, x] : entries_) live += x.exec != nullptr;
    if (opt_.max_graphs > 0 && live >= opt_.max_graphs) evict_one();
    if (e.failures > 0) ++stats_.rerecords;
    const auto t0 = std::chrono::steady_clock::now();
    DF_CUDA_CHECK(cudaStreamBeginCapture(stream_, capture_mode(opt_.mode)));
    try {
        const ModeScope capturing(set_mode_, StepMode::capturing);
        record();
    } catch (const std::exception& ex) {
        reason = ex.what();
    }
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(stream_, &graph);
    if (reason.empty() && err != cudaSuccess)
        reason = fmt::format("the capture ended with {}", cudaGetErrorString(err));
    if (reason.empty()) {
        cudaGraphExec_t exec = nullptr;
        err = cudaGraphInstantiate(&exec, graph, 0);
        if (err == cudaSuccess)
            e.exec = exec;
        else
            reason = fmt::format("instantiating the graph failed: {}", cudaGetErrorString(err));
    }
    if (graph) (void)cudaGraphDestroy(graph);
    // A failed capture leaves an error on the thread that must not be reported by the next op.
    (void)cudaGetLastError();
    stats_.capture_ms +=
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!e.exec) {
        ++e.failures;
        return false;
    }
    ++stats_.captures;
    return true;
}

void GraphCache::trim() {
    // Keys seen a few times and never captured (a prompt's prefill piece, a one-off shape) would
    // otherwise pile up over a long run: the ones not used lately are forgotten.
    for (auto it = entries_.begin(); it != entries_.end();) {
        const Entry& e = it->second;
        if (!e.exec && !e.stays_eager && e.last_use + kTrimAt / 2 < clock_)
            it = entries_.erase(it);
        else
            ++it;
    }
}

void GraphCache::evict_one() {
    Entry* oldest = nullptr;
    for (auto& [k, e] : entries_)
        if (e.exec && (!oldest || e.last_use < oldest->last_use)) oldest = &e;
    if (!oldest) return;
    destroy(*oldest);
    oldest->eager_runs = 0;  // warmed up again before it is recorded again
    ++stats_.evictions;
}

void GraphCache::release_owner(uint64_t owner) {
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->first.owner == owner) {
            destroy(it->second);
            it = entries_.erase(it);
        } else {
            ++it;
        }
    }
}

GraphStats GraphCache::stats() const {
    GraphStats s = stats_;
    s.live_graphs = 0;
    s.tracked_keys = static_cast<int64_t>(entries_.size());
    for (const auto& [k, e] : entries_) s.live_graphs += e.exec != nullptr;
    uint64_t used = 0;
    if (cudaDeviceGetGraphMemAttribute(device_, cudaGraphMemAttrUsedMemCurrent, &used) ==
        cudaSuccess)
        s.pool_bytes = static_cast<int64_t>(used);
    else
        (void)cudaGetLastError();
    return s;
}

}  // namespace dflash::cuda

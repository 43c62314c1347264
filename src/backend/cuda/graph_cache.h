// GraphCache: one CUDA device's recorded steps (docs/engine.md "Recorded steps (CUDA graphs)"). A
// step key is run eagerly for its warm-up runs, then captured on the device's stream in the
// configured capture mode (ThreadLocal by default, so threads driving other devices, or allocating,
// do not break it), instantiated and replayed from then on: the step's host code still runs (it
// stages inputs) while the backend queues none of its ops (StepMode::replaying), then the graph is
// launched. A capture that fails leaves the stream usable: the step runs eagerly, the failure is
// counted by reason and told once through GraphOptions::warn, and the key is tried again up to
// max_rerecords times before it stays eager. Keys that never got a graph are forgotten once they
// are many and old (trim), so one-off keys do not pile up over a long run. Owned by the CUDA
// backend, used by whichever thread drives it (one at a time). Tested by
// tests/cuda/graph_cuda_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <unordered_map>

#include "backend/step_graph.h"

struct CUstream_st;
struct CUgraphExec_st;

namespace dflash::cuda {

// What the backend does with the ops a step's record function queues.
enum class StepMode {
    eager,      // run them (outside steps, warm-up runs, fallbacks)
    capturing,  // run them into the capture (the stream is capturing)
    replaying,  // skip them: the graph launched after the record function holds them
};

class GraphCache {
  public:
    // set_mode: how the backend is to treat ops from now on (called around each record).
    GraphCache(GraphOptions opt, CUstream_st* stream, int device, std::string device_name,
               std::function<void(StepMode)> set_mode);
    ~GraphCache();
    GraphCache(const GraphCache&) = delete;
    GraphCache& operator=(const GraphCache&) = delete;

    void run(const StepKey& key, const std::function<void()>& record);
    uint64_t new_owner() { return ++last_owner_; }
    void release_owner(uint64_t owner);
    GraphStats stats() const;
    const GraphOptions& options() const { return opt_; }

  private:
    struct Entry {
        CUgraphExec_st* exec = nullptr;
        int eager_runs = 0;  // warm-up runs so far
        int failures = 0;    // failed captures so far
        bool stays_eager = false;
        uint64_t last_use = 0;  // for least-recently-used eviction
    };
    // Records `record` into a graph for `e`; false (and the reason) when the capture failed.
    bool capture(Entry& e, const std::function<void()>& record, std::string& reason);
    void evict_one();
    void trim();  // forgets keys without a graph that were not used lately
    void destroy(Entry& e);

    static constexpr size_t kTrimAt = 4096;  // keys remembered before trim() runs

    GraphOptions opt_;
    CUstream_st* stream_;
    int device_;
    std::string device_name_;
    std::function<void(StepMode)> set_mode_;
    std::unordered_map<StepKey, Entry, StepKeyHash> entries_;
    uint64_t clock_ = 0;
    uint64_t last_owner_ = 0;
    GraphStats stats_;
};

}  // namespace dflash::cuda

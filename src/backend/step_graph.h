// Replayable steps (docs/engine.md "Recorded steps (CUDA graphs)"): what a caller names when it
// asks a backend to run a step that a CUDA backend may record into a graph once and replay
// afterwards, the graph cache's options (the cuda_graphs.* settings) and its counters.
// Device-generic: the CPU backend simply runs steps. The CUDA graph cache itself is
// backend/cuda/graph_cache.h. Tested by tests/backend/step_graph_test.cpp and
// tests/cuda/graph_cuda_test.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dflash {

// One step's identity. Two runs with equal keys must queue the same work on the same device
// addresses: `owner` scopes the key to an object whose buffers stay put for its life (a session,
// a training worker; see StepOwner), and `dims` holds every shape and every address from outside
// that owner the step bakes in (output buffers, for instance).
struct StepKey {
    uint64_t owner = 0;
    std::string phase;          // "target.forward", "drafter.draft", "train.step", ...
    std::vector<int64_t> dims;  // shapes, then addresses (as integers)

    bool operator==(const StepKey&) const = default;
};

struct StepKeyHash {
    size_t operator()(const StepKey& k) const noexcept;
};

// cudaStreamCaptureMode: this_thread is CUDA's ThreadLocal (setting value "thread_local"): only
// the capturing thread's unsafe calls break its capture, so other threads may allocate and copy
// meanwhile (docs/performance.md: 8 of 8 concurrent captures succeed, 0 of 8 in global mode).
enum class CaptureMode { this_thread, global, relaxed };
CaptureMode parse_capture_mode(const std::string& s);  // "thread_local" | "global" | "relaxed"
std::string to_string(CaptureMode m);

struct GraphOptions {
    bool enabled = true;  // false: every step runs eagerly
    CaptureMode mode = CaptureMode::this_thread;
    int warmup_runs = 2;    // eager runs of a key before it is captured
    int max_rerecords = 3;  // failed captures of a key retried before it stays eager
    int max_graphs = 64;    // live graphs per device; the least recently used one goes
    // The decode block's kernels launched with programmatic dependent launch, so each starts
    // while the one before it finishes (Note [Programmatic dependent launch] in
    // backend/cuda/kernels/pdl.cuh); same results either way.
    bool programmatic_launch = true;
    // Told once per key whose capture failed (device, phase, the CUDA error). May be empty.
    std::function<void(const std::string&)> warn;
};

// Counters of one device's graph cache.
struct GraphStats {
    int64_t captures = 0;    // graphs recorded and instantiated
    int64_t replays = 0;     // steps run by launching a graph
    int64_t eager_runs = 0;  // steps run eagerly (warm-up, disabled, fallen back)
    int64_t rerecords = 0;   // captures tried again after a failed one
    int64_t evictions = 0;   // graphs dropped to stay within max_graphs
    int64_t live_graphs = 0;
    int64_t tracked_keys = 0;  // keys the cache remembers (with or without a graph)
    double capture_ms = 0;     // host time spent capturing and instantiating
    int64_t pool_bytes = 0;    // the device's graph memory pool in use (our graphs allocate none)
    std::map<std::string, int64_t> rerecord_reasons;  // reason -> count
    std::map<std::string, int64_t> fallback_reasons;  // reason -> keys that stay eager
    bool enabled = false;

    // "graphs: 3 captured (41.2 ms), 1200 replays, 6 eager runs, 0 fallbacks".
    std::string summary() const;
    nlohmann::json to_json() const;
};

}  // namespace dflash

// StepKey hashing, capture-mode names and GraphStats formatting. Tested by
// tests/backend/step_graph_test.cpp.
#include "backend/step_graph.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"

namespace dflash {

size_t StepKeyHash::operator()(const StepKey& k) const noexcept {
    // FNV-1a over the owner, the phase's bytes and the dims: keys are few and compared exactly.
    // (An in-process table's hash: its values are never stored.)
    uint64_t h = fnv1a64_u64(k.owner, kFnv1a64Offset);
    h = fnv1a64(k.phase, h);
    for (int64_t d : k.dims) h = fnv1a64_u64(static_cast<uint64_t>(d), h);
    return static_cast<size_t>(h);
}

CaptureMode parse_capture_mode(const std::string& s) {
    if (s == "thread_local") return CaptureMode::this_thread;
    if (s == "global") return CaptureMode::global;
    DF_CHECK(s == "relaxed",
             "cuda_graphs.capture_mode='{}' is not one of thread_local, global, relaxed", s);
    return CaptureMode::relaxed;
}

std::string to_string(CaptureMode m) {
    switch (m) {
        case CaptureMode::this_thread:
            return "thread_local";
        case CaptureMode::global:
            return "global";
        case CaptureMode::relaxed:
            return "relaxed";
    }
    return "?";
}

std::string GraphStats::summary() const {
    if (!enabled) return "graphs: off (steps run eagerly)";
    int64_t fallbacks = 0;
    for (const auto& [reason, n] : fallback_reasons) fallbacks += n;
    std::string s = fmt::format(
        "graphs: {} captured ({:.1f} ms), {} replays, {} eager runs, {} re-records, {} fallbacks",
        captures, capture_ms, replays, eager_runs, rerecords, fallbacks);
    for (const auto& [reason, n] : rerecord_reasons)
        s += fmt::format("\n  re-recorded x{}: {}", n, reason);
    for (const auto& [reason, n] : fallback_reasons)
        s += fmt::format("\n  fallback x{}: {}", n, reason);
    return s;
}

nlohmann::json GraphStats::to_json() const {
    return {{"enabled", enabled},
            {"captures", captures},
            {"replays", replays},
            {"eager_runs", eager_runs},
            {"rerecords", rerecords},
            {"evictions", evictions},
            {"live_graphs", live_graphs},
            {"tracked_keys", tracked_keys},
            {"capture_ms", capture_ms},
            {"pool_bytes", pool_bytes},
            {"rerecord_reasons", rerecord_reasons},
            {"fallback_reasons", fallback_reasons}};
}

}  // namespace dflash

// The target's decode step at batch size 1 (one token in, logits and the argmax back on the host,
// as SpeculativeEngine runs it) and a 16-token DFlash verify step, over a KV cache already holding
// `ctx` tokens, against the weight-read floor (every weight byte read once at 4.24 TB/s).
// Random weights of the Qwen3-0.6B and Qwen3-8B shapes. The same workload as
// tools/reference/torch_bench.py `decode`. On CUDA each case runs with the steps replayed from
// CUDA graphs and eagerly (--graphs on|off|both, default both). Usage: decode_bench
// [--backend cpu|cuda] [--preset qwen3_0_6b|qwen3_8b|tiny|all] [--ctx N] [--steps N]
// [--graphs on|off|both] [--fused on|off|both] (CUDA: the fused decode-block ops,
// LayerContext::rows_ops, or the general ones; default both on CUDA) [--pdl on|off|both] (CUDA:
// the decode block's kernels with programmatic dependent launch,
// GraphOptions::programmatic_launch; default on) [--rows-limit-mb N] (the RowsLimits of the fused
// path, both of its sizes; default RowsLimits{}) [--rows-single-mb N] (then its one-weight size
// alone). Each case also checks that
// the first row of the verify has the decode step's logits bit for bit (row invariance). A table on
// stderr, one JSON object per case on stdout.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "bench_util.h"
#include "model/target.h"

namespace dflash::bench {
namespace {

struct Preset {
    std::string name;
    int64_t layers, hidden, heads, kv_heads, head_dim, inter, vocab;
    bool tied;
};

const Preset kPresets[] = {
    {"qwen3_0_6b", 28, 1024, 16, 8, 128, 3072, 151936, true},
    {"qwen3_8b", 36, 4096, 32, 8, 128, 12288, 151936, false},
    {"tiny", 2, 128, 4, 2, 32, 256, 1000, true},
};

TargetConfig config_of(const Preset& p) {
    return qwen3_shape(p.layers, p.hidden, p.heads, p.kv_heads, p.head_dim, p.inter, p.vocab,
                       p.tied);
}

nlohmann::json run_case(Backend& be, const Preset& p, int64_t ctx, int steps, bool fused, bool pdl,
                        const RowsLimits& limits) {
    TargetModel model(be, config_of(p));
    RandomFill fill(be, 0.02f, 3);
    fill(model.params());
    constexpr int64_t kVerify = 16;
    TargetSession session(model, be, ctx + kVerify + 1, {}, 512, nullptr, fused, limits);
    Rng rng(5);
    std::vector<int32_t> prompt(static_cast<size_t>(ctx));
    for (auto& t : prompt) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(p.vocab)));
    DeviceTensor logits(be, {kVerify, p.vocab}, DType::f32);
    DeviceTensor argmax(be, {kVerify}, DType::i32);
    HostTensor ids({kVerify}, DType::i32);
    session.forward(prompt, logits.view().rows(0, 1), Tensor());
    std::vector<int32_t> block(kVerify);
    for (auto& t : block) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(p.vocab)));
    // One step: feed n tokens, logits of all n, argmax on the device, the ids to the host, and
    // back to the same cache length (every step sees ctx cached tokens).
    auto step = [&](int64_t n) {
        session.forward(std::span(block).first(static_cast<size_t>(n)), logits.view().rows(0, n),
                        Tensor());
        be.argmax_rows(logits.view().rows(0, n), argmax.view().rows(0, n));
        be.download(ids.view().rows(0, n), argmax.view().rows(0, n));
        session.crop(ctx);
    };
    const double decode = median_seconds(be, 5, steps, [&] { step(1); });
    const double verify = median_seconds(be, 5, steps, [&] { step(kVerify); });
    // Row invariance: the verify's first row against the decode step, bit for bit.
    HostTensor one({1, p.vocab}, DType::f32), first({1, p.vocab}, DType::f32);
    step(1);
    be.download(one.view(), logits.view().rows(0, 1));
    step(kVerify);
    be.download(first.view(), logits.view().rows(0, 1));
    const bool invariant = std::memcmp(one.view().data(), first.view().data(),
                                       static_cast<size_t>(p.vocab) * sizeof(float)) == 0;
    const double weight_bytes = static_cast<double>(model.params().numel()) *
                                static_cast<double>(dtype_size(be.compute_dtype()));
    const double floor = weight_bytes / kHbmBytesPerS;
    const GraphStats gs = be.graph_stats();
    std::fprintf(stderr,
                 "%-10s ctx %5lld %-6s %-7s %-6s decode %7.3f ms (floor %.3f ms, %.2fx)  verify16 "
                 "%7.3f ms (%.2fx decode)  rows %s\n",
                 p.name.c_str(), static_cast<long long>(ctx), gs.enabled ? "graphs" : "eager",
                 fused ? "fused" : "general", pdl ? "pdl" : "serial", decode * 1e3, floor * 1e3,
                 decode / floor, verify * 1e3, verify / decode, invariant ? "invariant" : "DIFFER");
    if (gs.enabled) std::fprintf(stderr, "  %s\n", gs.summary().c_str());
    return {{"bench", "target_decode"},
            {"impl", "dflash"},
            {"backend", be.name()},
            {"graphs", gs.to_json()},
            {"preset", p.name},
            {"ctx", ctx},
            {"fused", fused},
            {"programmatic_launch", pdl},
            {"rows_limit_bytes", limits.max_product_bytes},
            {"rows_single_limit_bytes", limits.max_single_bytes},
            {"row_invariant", invariant},
            {"decode_ms", decode * 1e3},
            {"verify16_ms", verify * 1e3},
            {"verify_over_decode", verify / decode},
            {"weight_floor_ms", floor * 1e3},
            {"params", model.params().numel()}};
}

}  // namespace
}  // namespace dflash::bench

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    using namespace dflash;
    std::string backend = "auto", preset = "all", graphs = "both", fused = "both", pdl = "on";
    int64_t ctx = 1024;
    int steps = 30;
    RowsLimits limits;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--backend")) backend = argv[i + 1];
        if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
        if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--graphs")) graphs = argv[i + 1];
        if (!std::strcmp(argv[i], "--fused")) fused = argv[i + 1];
        if (!std::strcmp(argv[i], "--pdl")) pdl = argv[i + 1];
        if (!std::strcmp(argv[i], "--rows-limit-mb")) {
            limits.max_product_bytes = limits.max_single_bytes = std::atoll(argv[i + 1]) << 20;
        }
        if (!std::strcmp(argv[i], "--rows-single-mb"))
            limits.max_single_bytes = std::atoll(argv[i + 1]) << 20;
    }
    try {
        const DeviceKind kind = resolve_backend(backend);
        std::vector<bool> modes;
        if (kind == DeviceKind::cuda && graphs != "off") modes.push_back(true);
        if (kind != DeviceKind::cuda || graphs != "on") modes.push_back(false);
        std::vector<bool> ways;
        if (kind == DeviceKind::cuda && fused != "off") ways.push_back(true);
        if (kind != DeviceKind::cuda || fused != "on") ways.push_back(false);
        std::vector<bool> launches;
        if (kind == DeviceKind::cuda && pdl != "off") launches.push_back(true);
        if (kind != DeviceKind::cuda || pdl != "on") launches.push_back(false);
        std::fprintf(stderr, "target decode step (median of %d steps)\n", steps);
        for (const auto& p : bench::kPresets) {
            const bool pick = preset == p.name || (preset == "all" && p.name != "tiny");
            if (!pick) continue;
            for (const bool way : ways) {
                for (const bool on : modes) {
                    for (const bool early : launches) {
                        GraphOptions g;
                        g.enabled = on;
                        g.programmatic_launch = early;
                        auto be = make_backend(kind, 0, 2, g);
                        bench::emit(bench::run_case(*be, p, ctx, steps, way, early, limits));
                    }
                }
            }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "decode_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

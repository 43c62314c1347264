// The DFlash drafter training step (target features given) on one device, as `dflash train` runs
// it per micro-batch: fc + hidden_norm, L decoder layers with KV injection and the block-sparse
// mask, final norm, the frozen 152K LM head with the decay-weighted chunked cross-entropy,
// backward through the drafter, gradient norm, clipping factor and AdamW (fp32 masters) — timed
// as whole steps (median of repeated steps after warm-up). The same workload, shapes and FLOP
// count as tools/reference/torch_bench.py `drafter`, so the two are compared in one GPU call.
// Usage: train_step_bench [--backend cpu|cuda] [--preset NAME|all] [--steps N]. Presets: d1024,
// d2048, d4096 (docs/performance.md target #1), qwen3_4b, qwen3_8b (#2, SpecForge's geometries),
// tiny (CPU smoke). Prints a table on stderr and one JSON object per case on stdout.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/workspace.h"
#include "bench_util.h"
#include "data/anchors.h"
#include "model/drafter.h"
#include "train/optimizer.h"

namespace dflash::bench {
namespace {

struct Preset {
    std::string name;
    int64_t hidden, layers, heads, kv_heads, head_dim, inter, vocab, seq, anchors, block, features;
};

const Preset kPresets[] = {
    {"d1024", 1024, 4, 16, 8, 128, 3072, 151936, 4096, 1024, 16, 5},
    {"d2048", 2048, 4, 16, 8, 128, 6144, 151936, 4096, 1024, 16, 5},
    {"d4096", 4096, 5, 32, 8, 128, 12288, 151936, 4096, 1024, 16, 5},
    {"qwen3_4b", 2560, 5, 32, 8, 128, 9728, 151936, 4096, 512, 16, 5},
    {"qwen3_8b", 4096, 5, 32, 8, 128, 12288, 151936, 3072, 512, 16, 5},
    {"tiny", 128, 2, 4, 2, 32, 256, 1000, 256, 16, 8, 3},
};

// Only the drafter's K feature ids depend on the target's depth (36, as Qwen3-8B).
TargetConfig target_shape(const Preset& p) {
    return qwen3_shape(36, p.hidden, p.heads, p.kv_heads, p.head_dim, p.inter, p.vocab, false);
}

// Model FLOPs of one step (the formula tools/reference/torch_bench.py prints).
double step_flops(const Preset& p, const std::vector<int32_t>& anchors) {
    const double D = static_cast<double>(p.hidden), S = static_cast<double>(p.seq);
    const double R = static_cast<double>(anchors.size() * p.block);
    const double qd = static_cast<double>(p.heads * p.head_dim);
    const double kvd = static_cast<double>(p.kv_heads * p.head_dim);
    const double qo_mlp = 2 * D * qd + 3 * D * static_cast<double>(p.inter), kv = 2 * D * kvd;
    double pairs = 0;
    for (int32_t a : anchors) pairs += static_cast<double>(p.block) * (a + p.block);
    const double fc = 4 * S * (static_cast<double>(p.features) * D) * D;
    const double layers = static_cast<double>(p.layers) *
                          (6 * R * qo_mlp + 6 * (S + R) * kv +
                           3.5 * 4 * static_cast<double>(p.head_dim * p.heads) * pairs);
    const double head = 4 * R * static_cast<double>(p.vocab) * D;
    return fc + layers + head;
}

nlohmann::json run_case(Backend& be, const Preset& p, int steps) {
    const TargetConfig tc = target_shape(p);
    const DrafterConfig dc = make_drafter_config(tc, p.layers, p.block, p.vocab - 1,
                                                 default_target_layer_ids(36, p.features));
    DrafterModel drafter(be, dc);
    drafter.params().enable_training();
    RandomFill fill(be, 0.02f, 7);
    fill(drafter.params());
    // The target's frozen embedding and LM head, and the features it would hand over.
    DeviceTensor embed(be, {p.vocab, p.hidden}, be.compute_dtype());
    DeviceTensor head(be, {p.vocab, p.hidden}, be.compute_dtype());
    DeviceTensor features(be, {p.seq, p.features * p.hidden}, be.compute_dtype());
    fill(embed);
    fill(head);
    RandomFill unit(be, 1.0f, 8);
    unit(features);
    Rng rng(11);
    std::vector<int32_t> tokens(static_cast<size_t>(p.seq));
    for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(p.vocab - 1)));
    const std::vector<uint8_t> mask(tokens.size(), 1);
    const std::vector<int32_t> anchors = sample_anchors(mask, p.anchors, rng);
    const double gamma = 7.0;
    const double w = drafter.weight_sum(mask, anchors, gamma);
    const int64_t chunk = 8192;

    train::AdamW opt(drafter.params(), {0.9, 0.95, 1e-8, 0.0});
    const LossStatsLayout lay{p.block};
    DeviceTensor out(be, {lay.size() + 2}, DType::f32);
    const Tensor stats = out.view().rows(0, lay.size());
    const Tensor norm_sq = out.view().rows(lay.size(), lay.size() + 1);
    const Tensor clip = out.view().rows(lay.size() + 1, lay.size() + 2);
    auto step_body = [&](Backend& b, Workspace& ws) {
        drafter.train_step(b, ws, {features, tokens, mask, anchors}, {embed, head, gamma, chunk},
                           {static_cast<float>(1.0 / w), stats});
    };
    Workspace ws(be, plan_workspace(be, step_body));
    HostTensor host({lay.size() + 2});
    const StepOwner owner(be);
    // As the trainer runs it: a recorded micro-batch and a recorded update (CUDA graphs when
    // cuda_graphs are on), then the step's one download.
    auto step = [&] {
        drafter.params().zero_grads();
        be.fill(out, 0.0f);
        ws.reset();
        ws.settle_inputs();
        opt.begin_step(be, 1e-4);
        be.run_step(StepKey{owner.id(), "train.microbatch", {}}, [&] { step_body(be, ws); });
        be.run_step(StepKey{owner.id(), "train.update", {}}, [&] {
            train::grad_norm_sq(be, drafter.params(), norm_sq);
            be.clip_scale(norm_sq, 1.0f, clip);
            opt.apply(be, drafter.params(), clip);
        });
        be.download(host.view(), out);
    };
    const double secs = median_seconds(be, 3, steps, step);
    const double flops = step_flops(p, anchors);
    const double R = static_cast<double>(anchors.size() * p.block);
    const double loss = host.f32()[LossStatsLayout::kLossSum] / w;
    nlohmann::json j = {{"bench", "drafter_train_step"},
                        {"impl", "dflash"},
                        {"backend", be.name()},
                        {"preset", p.name},
                        {"ms", secs * 1e3},
                        {"draft_positions_per_s", R / secs},
                        {"tokens_per_s", static_cast<double>(p.seq) / secs},
                        {"tflops", flops / secs / 1e12},
                        {"mfu", flops / secs / 1e12 / kPeakTflops},
                        {"flops_per_step", flops},
                        {"loss", loss},
                        {"workspace_bytes", ws.capacity().device_bytes},
                        {"graphs", be.graph_stats().to_json()},
                        {"params", drafter.params().numel()}};
    std::fprintf(stderr,
                 "%-9s %9.2f ms  %8.1fK draft pos/s  %7.1f TFLOP/s  MFU %5.1f%%  loss %.3f\n",
                 p.name.c_str(), secs * 1e3, R / secs / 1e3, flops / secs / 1e12,
                 100 * flops / secs / 1e12 / kPeakTflops, loss);
    return j;
}

}  // namespace
}  // namespace dflash::bench

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    using namespace dflash;
    std::string backend = "auto", preset = "all";
    int steps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--backend")) backend = argv[i + 1];
        if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
        if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    }
    try {
        const DeviceKind kind = resolve_backend(backend);
        auto be = make_backend(kind, 0, 2);
        std::fprintf(stderr, "drafter training step on %s (median of %d steps)\n",
                     be->name().c_str(), steps);
        for (const auto& p : bench::kPresets) {
            const bool pick = preset == p.name || (preset == "all" && p.name != "tiny");
            if (pick) bench::emit(bench::run_case(*be, p, steps));
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "train_step_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

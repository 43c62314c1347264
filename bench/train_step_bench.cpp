// The drafter training step (target features given) on one device, as `dflash train` runs it per
// micro-batch: fc + hidden_norm, L decoder layers with KV injection and the block-sparse mask,
// final norm, the frozen 152K LM head with the chunked loss, backward through the drafter,
// gradient norm, clipping factor and the optimizer (fp32 masters) — timed as whole steps (median
// of repeated steps after warm-up). DFlash: the decay-weighted CE, the same workload, shapes and
// FLOP count as tools/reference/torch_bench.py `drafter`. DSpark (docs/training.md "DSpark
// drafters"): the DSpark loss (CE + L1 against the target's final hidden states through the
// frozen head + the confidence BCE) with the default heads (vanilla Markov head of rank 256, the
// confidence head on [h; e]). Optimizer AdamW, or Muon for the 2-D weights (train.optimizer);
// recomputation = train.recompute_layers. Peak device memory is the backend's allocator counter
// (Backend::memory_counters: parameters, masters, gradients, optimizer state, workspace, the
// frozen embedding / head and the features), reset at the start of each case.
// Usage: train_step_bench [--backend cpu|cuda] [--preset NAME|all] [--steps N]
//   [--arch dflash|dspark] [--optimizer adamw|muon] [--seq N] [--anchors N]
//   [--recompute-layers N] [--matrix issue26]
// Presets: d1024, d2048, d4096 (docs/performance.md target #1), qwen3_4b, qwen3_8b (#2,
// SpecForge's geometries), tiny (CPU smoke). --seq / --anchors replace the preset's. Recompute:
// N > 0 recomputes every draft layer (train.recompute_layers is all or none). --matrix issue26
// runs the 16 cases of issue 26 at the chosen preset (default qwen3_8b): seq 3072 and 8192, 512
// anchors, recomputation off and on, AdamW and Muon, DFlash and DSpark; --seq / --anchors given
// with it replace the sequence lengths / the anchor count (a CPU smoke run: --backend cpu --preset
// tiny --matrix issue26 --seq 96 --anchors 6 --steps 1). A case that fails (out of memory, say)
// prints its error and the matrix goes on. Prints a table on stderr and one JSON object per case
// on stdout.
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

// One case: a preset's geometry with the step's variant.
struct Case {
    Preset p;
    bool dspark = false;
    bool muon = false;
    bool recompute = false;
};

std::string case_name(const Case& c) {
    return c.p.name + "/" + (c.dspark ? "dspark" : "dflash") + "/" + (c.muon ? "muon" : "adamw") +
           "/seq" + std::to_string(c.p.seq) + "/a" + std::to_string(c.p.anchors) +
           (c.recompute ? "/recompute" : "");
}

// Only the drafter's K feature ids depend on the target's depth (36, as Qwen3-8B).
TargetConfig target_shape(const Preset& p) {
    return qwen3_shape(36, p.hidden, p.heads, p.kv_heads, p.head_dim, p.inter, p.vocab, false);
}

// Model FLOPs of one step (the formula tools/reference/torch_bench.py prints). DSpark's head is
// [lm_head | W2] (W = D + r columns) and runs twice: the CE pass as DFlash's (4·R·V·W: logits and
// dh; the frozen head's weight gradient is not counted, though W2's columns are computed) and the
// L1 pass against the teacher (8·R·V·W: the teacher's logits, the draft's, dh and the combined
// weight gradient). The recomputed layer forwards are not model FLOPs.
double step_flops(const Case& c, const std::vector<int32_t>& anchors, int64_t rank) {
    const Preset& p = c.p;
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
    const double V = static_cast<double>(p.vocab);
    const double head = c.dspark ? 12 * R * V * (D + static_cast<double>(rank)) : 4 * R * V * D;
    return fc + layers + head;
}

nlohmann::json run_case(Backend& be, const Case& c, int steps) {
    const Preset& p = c.p;
    be.reset_peak_memory();
    const int64_t base_bytes = be.memory_counters().live_bytes;
    const TargetConfig tc = target_shape(p);
    DrafterConfig dc = make_drafter_config(tc, p.layers, p.block, p.vocab - 1,
                                           default_target_layer_ids(36, p.features));
    if (c.dspark) dc.arch = DrafterArch::dspark;  // the default heads (DsparkConfig)
    DrafterModel drafter(be, dc);
    drafter.params().enable_training();
    RandomFill fill(be, 0.02f, 7);
    fill(drafter.params());
    // The target's frozen embedding and LM head, the features it would hand over and (DSpark)
    // its final hidden states, the teacher.
    DeviceTensor embed(be, {p.vocab, p.hidden}, be.compute_dtype());
    DeviceTensor head(be, {p.vocab, p.hidden}, be.compute_dtype());
    DeviceTensor features(be, {p.seq, p.features * p.hidden}, be.compute_dtype());
    DeviceTensor teacher;
    fill(embed);
    fill(head);
    RandomFill unit(be, 1.0f, 8);
    unit(features);
    BlockObjective obj;
    if (c.dspark) {
        teacher = DeviceTensor(be, {p.seq, p.hidden}, be.compute_dtype());
        unit(teacher);
        obj.teacher_hidden = teacher;
    }
    Rng rng(11);
    std::vector<int32_t> tokens(static_cast<size_t>(p.seq));
    for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(p.vocab - 1)));
    const std::vector<uint8_t> mask(tokens.size(), 1);
    const std::vector<int32_t> anchors = sample_anchors(mask, p.anchors, rng);
    const double gamma = 7.0;
    const double w = drafter.weight_sum(mask, anchors, gamma);
    DrafterLossSpec loss{embed, head, gamma, 8192};
    loss.recompute_layers = c.recompute;

    train::AdamWConfig oc;
    oc.weight_decay = 0.0;
    oc.muon.enabled = c.muon;
    train::AdamW opt(drafter.params(), oc);
    const LossStatsLayout lay{p.block};
    DeviceTensor out(be, {lay.size() + 2}, DType::f32);
    const Tensor stats = out.view().rows(0, lay.size());
    const Tensor norm_sq = out.view().rows(lay.size(), lay.size() + 1);
    const Tensor clip = out.view().rows(lay.size() + 1, lay.size() + 2);
    auto step_body = [&](Backend& b, Workspace& ws) {
        drafter.train_step(b, ws, {features, tokens, mask, anchors}, loss,
                           {static_cast<float>(1.0 / w), stats}, obj);
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
    const double flops = step_flops(c, anchors, dc.ds.markov_rank);
    const double R = static_cast<double>(anchors.size() * p.block);
    const double loss_value = host.f32()[LossStatsLayout::kLossSum] / w;
    const MemoryCounters mem = be.memory_counters();
    const double peak_gib = static_cast<double>(mem.peak_bytes - base_bytes) / (1 << 30);
    nlohmann::json j = {{"bench", "drafter_train_step"},
                        {"impl", "dflash"},
                        {"backend", be.name()},
                        {"preset", p.name},
                        {"case", case_name(c)},
                        {"arch", c.dspark ? "dspark" : "dflash"},
                        {"optimizer", c.muon ? "muon" : "adamw"},
                        {"seq", p.seq},
                        {"anchors", static_cast<int64_t>(anchors.size())},
                        {"recompute_layers", c.recompute},
                        {"ms", secs * 1e3},
                        {"samples_per_s", 1.0 / secs},
                        {"draft_positions_per_s", R / secs},
                        {"tokens_per_s", static_cast<double>(p.seq) / secs},
                        {"tflops", flops / secs / 1e12},
                        {"mfu", flops / secs / 1e12 / kPeakTflops},
                        {"flops_per_step", flops},
                        {"loss", loss_value},
                        {"peak_device_bytes", mem.peak_bytes - base_bytes},
                        {"workspace_bytes", ws.capacity().device_bytes},
                        {"graphs", be.graph_stats().to_json()},
                        {"params", drafter.params().numel()}};
    std::fprintf(stderr,
                 "%-40s %9.2f ms  %6.2f samples/s  %8.1fK draft pos/s  %6.1f TFLOP/s  MFU %5.1f%%  "
                 "peak %6.2f GiB  loss %.3f\n",
                 case_name(c).c_str(), secs * 1e3, 1.0 / secs, R / secs / 1e3, flops / secs / 1e12,
                 100 * flops / secs / 1e12 / kPeakTflops, peak_gib, loss_value);
    return j;
}

// The issue-26 matrix at preset p: seq lengths x recomputation x optimizer x architecture.
std::vector<Case> issue26_cases(const Preset& p, const std::vector<int64_t>& seqs,
                                int64_t anchors) {
    std::vector<Case> out;
    for (int64_t seq : seqs)
        for (bool recompute : {false, true})
            for (bool muon : {false, true})
                for (bool dspark : {false, true}) {
                    Case c{p, dspark, muon, recompute};
                    c.p.seq = seq;
                    c.p.anchors = anchors;
                    out.push_back(c);
                }
    return out;
}

}  // namespace
}  // namespace dflash::bench

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    using namespace dflash;
    std::string backend = "auto", preset, arch = "dflash", optimizer = "adamw", matrix;
    int steps = 10;
    int64_t seq = 0, anchors = 0, recompute = 0;
    for (int i = 1; i < argc; ++i) {
        const std::string flag = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "train_step_bench: %s needs a value\n", flag.c_str());
            return 2;
        }
        const std::string v = argv[++i];
        if (flag == "--backend") {
            backend = v;
        } else if (flag == "--preset") {
            preset = v;
        } else if (flag == "--steps") {
            steps = std::stoi(v);
        } else if (flag == "--arch") {
            arch = v;
        } else if (flag == "--optimizer") {
            optimizer = v;
        } else if (flag == "--seq") {
            seq = std::stoll(v);
        } else if (flag == "--anchors") {
            anchors = std::stoll(v);
        } else if (flag == "--recompute-layers") {
            recompute = std::stoll(v);
        } else if (flag == "--matrix") {
            matrix = v;
        } else {
            std::fprintf(stderr, "train_step_bench: unknown flag %s\n", flag.c_str());
            return 2;
        }
    }
    if ((arch != "dflash" && arch != "dspark") || (optimizer != "adamw" && optimizer != "muon") ||
        (!matrix.empty() && matrix != "issue26")) {
        std::fprintf(stderr,
                     "train_step_bench: --arch dflash|dspark, --optimizer adamw|muon, --matrix "
                     "issue26\n");
        return 2;
    }
    if (preset.empty()) preset = matrix.empty() ? "all" : "qwen3_8b";
    try {
        const DeviceKind kind = resolve_backend(backend);
        auto be = make_backend(kind, 0, 2);
        std::fprintf(stderr, "drafter training step on %s (median of %d steps)\n",
                     be->name().c_str(), steps);
        std::vector<bench::Case> cases;
        for (const auto& p : bench::kPresets) {
            const bool pick = preset == p.name || (preset == "all" && p.name != "tiny");
            if (!pick) continue;
            if (matrix == "issue26") {
                const std::vector<int64_t> seqs =
                    seq > 0 ? std::vector<int64_t>{seq} : std::vector<int64_t>{3072, 8192};
                const auto m = bench::issue26_cases(p, seqs, anchors > 0 ? anchors : 512);
                cases.insert(cases.end(), m.begin(), m.end());
                continue;
            }
            bench::Case c{p, arch == "dspark", optimizer == "muon", recompute > 0};
            if (seq > 0) c.p.seq = seq;
            if (anchors > 0) c.p.anchors = anchors;
            cases.push_back(c);
        }
        if (cases.empty()) {
            std::fprintf(stderr, "train_step_bench: no preset named %s\n", preset.c_str());
            return 2;
        }
        int failed = 0;
        std::vector<nlohmann::json> done;
        for (const auto& c : cases) {
            try {
                done.push_back(bench::run_case(*be, c, steps));
                bench::emit(done.back());
            } catch (const std::exception& e) {
                // The next case still runs (an 8K case out of memory says nothing of the others).
                ++failed;
                std::fprintf(stderr, "%-40s failed: %s\n", bench::case_name(c).c_str(), e.what());
                bench::emit({{"bench", "drafter_train_step"},
                             {"case", bench::case_name(c)},
                             {"error", e.what()}});
            }
        }
        // The whole run as one markdown table (docs/performance.md's layout).
        if (done.size() > 1) {
            std::fprintf(
                stderr,
                "\n| preset | arch | optimizer | seq | anchors | recompute | ms | samples/s "
                "| peak GiB |\n|---|---|---|---|---|---|---|---|---|\n");
            for (const auto& j : done)
                std::fprintf(
                    stderr, "| %s | %s | %s | %lld | %lld | %s | %.1f | %.2f | %.2f |\n",
                    j["preset"].get<std::string>().c_str(), j["arch"].get<std::string>().c_str(),
                    j["optimizer"].get<std::string>().c_str(),
                    static_cast<long long>(j["seq"].get<int64_t>()),
                    static_cast<long long>(j["anchors"].get<int64_t>()),
                    j["recompute_layers"].get<bool>() ? "on" : "off", j["ms"].get<double>(),
                    j["samples_per_s"].get<double>(),
                    static_cast<double>(j["peak_device_bytes"].get<int64_t>()) / (1 << 30));
        }
        return failed == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "train_step_bench: %s\n", e.what());
        return 1;
    }
}

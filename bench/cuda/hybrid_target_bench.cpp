// Whole hybrid linear-attention targets on one GPU (issue 25): the online training step's target
// part (a forward of 3072 and of 8192 tokens keeping the hidden states of five layers, no LM head:
// the Gated DeltaNet layers run the chunked delta rule), and over a 1024-token cache the bs=1
// decode step, a 16-token verify accepted in full, and a 16-token verify rolled back to a accepted
// tokens (TargetSession::crop: checkpoint + replay, docs/engine.md), at Qwen3.5-27B (dense) and
// Qwen3.5-35B-A3B (MoE) geometry with random bf16 weights (norm scales 1). Both whole models fit on
// one H200 (about 54 and 70 GB); --layers N runs the first N layers instead (the 3:1 linear/full
// pattern kept) and prints the forward scaled to the whole model as well (a layer subset is said
// so in every line and JSON record). Each figure against its floor: the forward against the dense
// bf16 peak over its FLOPs (2 x the active parameters per token of the layers that run, up to the
// deepest captured one, attention, the chunked delta rule's products), a decode step against HBM
// over the bytes it must read (the active parameters, the LM head, the KV cache, each linear
// layer's f32 state read and written once). tools/reference/hybrid_target_bench.py runs the same
// workloads with transformers. Usage: hybrid_target_bench [--preset
// qwen3_5_27b|qwen3_5_35b_a3b|all] [--seq N,N] [--ctx N]
// [--steps N] [--accept A] [--layers N]. A table on stderr, one JSON object per case on stdout.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "../bench_util.h"
#include "backend/backend_factory.h"
#include "backend/workspace.h"
#include "model/target.h"

namespace dflash::bench {
namespace {

struct HybridPreset {
    std::string name;
    TargetConfig cfg;
    std::vector<int64_t> capture;  // the released drafters' target layers (0-based outputs)
};

// Qwen3.5's shared shape: every fourth layer full (gated) attention, head dim 256 with RoPE on its
// first 64 dims (theta 1e7), Gated DeltaNet layers with Hk = 16 key heads, dk = dv = 128, K = 4.
TargetConfig qwen3_5_shape(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads,
                           int64_t hv, int64_t inter) {
    TargetConfig c = qwen3_shape(layers, hidden, heads, kv_heads, 256, inter, 248320, false);
    c.model_type = "qwen3_5";
    c.max_position_embeddings = 262144;
    c.rope.theta = 1e7;
    c.partial_rotary_factor = 0.25;
    c.attn_output_gate = true;
    for (int64_t i = 0; i < layers; ++i)
        c.layer_types.emplace_back(i % 4 == 3 ? "full_attention" : "linear_attention");
    c.linear_num_key_heads = 16;
    c.linear_num_value_heads = hv;
    c.linear_key_head_dim = 128;
    c.linear_value_head_dim = 128;
    c.linear_conv_kernel_dim = 4;
    return c;
}

TargetConfig qwen3_5_27b() {
    return qwen3_5_shape(64, 5120, 24, 4, 48, 17408);
}

TargetConfig qwen3_5_35b_a3b() {
    // intermediate_size is the dense MLP's: no layer has one (every layer is MoE).
    TargetConfig c = qwen3_5_shape(40, 2048, 16, 2, 32, 512);
    c.model_type = "qwen3_5_moe";
    c.num_experts = 256;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 512;
    c.shared_expert_intermediate_size = 512;
    c.norm_topk_prob = true;
    return c;
}

std::vector<HybridPreset> presets() {
    return {{"qwen3_5_27b", qwen3_5_27b(), {1, 16, 31, 46, 61}},
            {"qwen3_5_35b_a3b", qwen3_5_35b_a3b(), {1, 10, 19, 28, 37}}};
}

// The first n layers of p (the capture ids below n kept, and layer n - 1 captured too: the forward
// stops after the deepest captured layer, so without it a subset of 16 layers of Qwen3.5-27B, whose
// ids below 16 are only {1}, ran 2 layers and its whole-model scaling was 8x too small).
HybridPreset first_layers(const HybridPreset& p, int64_t n) {
    HybridPreset q = p;
    q.cfg.num_hidden_layers = n;
    q.cfg.layer_types.resize(static_cast<size_t>(n));
    q.capture.clear();
    for (const int64_t id : p.capture)
        if (id < n - 1) q.capture.push_back(id);
    q.capture.push_back(n - 1);
    return q;
}

// Parameters a token touches, per layer kind, all layers; the LM head apart.
struct Active {
    double layer_params = 0;
    double lm_head_params = 0;
};

Active active_params(const TargetConfig& c) {
    const auto D = static_cast<double>(c.hidden_size);
    const auto H = static_cast<double>(c.num_attention_heads);
    const auto Hkv = static_cast<double>(c.num_key_value_heads);
    const auto Dh = static_cast<double>(c.head_dim);
    const auto Hv = static_cast<double>(c.linear_num_value_heads);
    const auto dv = static_cast<double>(c.linear_value_head_dim);
    const auto C = static_cast<double>(c.linear_conv_dim());
    // q (+ its gate), k, v, o.
    const double attn = D * Dh * ((c.attn_output_gate ? 2 : 1) * H + 2 * Hkv) + H * Dh * D;
    // qkv, z, b, a, out, the convolution.
    const double linear = D * (C + Hv * dv + 2 * Hv) + Hv * dv * D +
                          C * static_cast<double>(c.linear_conv_kernel_dim);
    Active a;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        a.layer_params += c.is_linear_layer(l) ? linear : attn;
        if (c.is_moe_layer(l)) {
            const auto E = static_cast<double>(c.num_experts);
            const auto k = static_cast<double>(c.num_experts_per_tok);
            const auto Ie = static_cast<double>(c.moe_intermediate_size);
            const auto Is = static_cast<double>(c.shared_expert_intermediate_size);
            a.layer_params += E * D + k * 3 * D * Ie + 3 * D * Is + D;
        } else {
            a.layer_params += 3 * D * static_cast<double>(c.intermediate_size);
        }
    }
    a.lm_head_params = static_cast<double>(c.vocab_size) * D;
    return a;
}

// FLOPs of a causal S-token forward beyond the projections: QK^T and PV on the full-attention
// layers, the chunked delta rule's products on the linear ones (bench/cuda/gdn_bench.cpp's count,
// chunk 64, dk = dv).
double mixer_flops(const TargetConfig& c, int64_t S) {
    const double s = static_cast<double>(S);
    const double pairs = s * (s + 1) / 2;
    const auto d = static_cast<double>(c.linear_key_head_dim);
    const auto Hv = static_cast<double>(c.linear_num_value_heads);
    double f = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        f += c.is_linear_layer(l)
                 ? s * Hv * (7.0 * 64 * d + 6.0 * d * d)
                 : 4.0 * pairs * static_cast<double>(c.num_attention_heads * c.head_dim);
    }
    return f;
}

std::string subset_note(const TargetConfig& c, int64_t full_layers) {
    if (c.num_hidden_layers == full_layers) return "";
    return " [" + std::to_string(c.num_hidden_layers) + " of " + std::to_string(full_layers) +
           " layers]";
}

void run_forward(Backend& be, const HybridPreset& p, const TargetModel& model, int64_t seq,
                 int steps, int64_t full_layers, Rng& rng) {
    const TargetConfig& c = p.cfg;
    std::vector<int32_t> tokens(static_cast<size_t>(seq));
    for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
    const int64_t K = static_cast<int64_t>(p.capture.size());
    DeviceTensor features(be, {seq, K * c.hidden_size}, be.compute_dtype());
    // As in the training step, the layers after the deepest captured one do not run.
    auto body = [&](Backend& b, Workspace& w) {
        model.forward(b, w, tokens, p.capture, features.view(), Tensor());
    };
    Workspace ws(be, plan_workspace(be, body));
    auto step = [&] {
        ws.reset();
        body(be, ws);
    };
    const double t = median_seconds(be, 1, steps, step);
    TargetConfig ran = c;
    ran.num_hidden_layers = *std::max_element(p.capture.begin(), p.capture.end()) + 1;
    const Active act = active_params(ran);
    const double flops = 2.0 * act.layer_params * static_cast<double>(seq) + mixer_flops(ran, seq);
    const double floor = flops / (kPeakTflops * 1e12);
    const double scale =
        static_cast<double>(full_layers) / static_cast<double>(c.num_hidden_layers);
    std::fprintf(stderr,
                 "%-16s forward %5lld tok  %9.2f ms  %6.1f TFLOP/s (%4.1f%% of peak; floor %.2f "
                 "ms)  workspace %.2f GB%s",
                 p.name.c_str(), static_cast<long long>(seq), t * 1e3, flops / t * 1e-12,
                 100.0 * floor / t, floor * 1e3,
                 static_cast<double>(ws.high_water().device_bytes) * 1e-9,
                 subset_note(c, full_layers).c_str());
    if (scale != 1.0) std::fprintf(stderr, " (whole model ~%.1f ms)", t * scale * 1e3);
    std::fprintf(stderr, "\n");
    emit({{"bench", "hybrid_target_forward"},
          {"impl", "dflash"},
          {"preset", p.name},
          {"seq", seq},
          {"layers", c.num_hidden_layers},
          {"model_layers", full_layers},
          {"ms", t * 1e3},
          {"whole_model_ms_scaled", t * scale * 1e3},
          {"tflops", flops / t * 1e-12},
          {"flop_floor_ms", floor * 1e3},
          {"active_layer_params", act.layer_params},
          {"workspace_bytes", ws.high_water().device_bytes}});
}

void run_decode(Backend& be, const HybridPreset& p, const TargetModel& model, int64_t ctx,
                int steps, int64_t accept, int64_t full_layers, Rng& rng) {
    const TargetConfig& c = p.cfg;
    constexpr int64_t kVerify = 16;
    constexpr int kWarmup = 3;
    // Every timed call leaves the session longer (a decode by 1, a rolled-back verify by a):
    // room for all of them, so no call crops back past a checkpoint.
    const int64_t room = (kWarmup + steps) * (1 + kVerify + accept) + kVerify;
    TargetSession session(model, be, ctx + room, {}, 512);
    std::vector<int32_t> prompt(static_cast<size_t>(ctx));
    for (auto& t : prompt) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
    DeviceTensor logits(be, {kVerify, c.vocab_size}, DType::f32);
    DeviceTensor argmax(be, {kVerify}, DType::i32);
    HostTensor ids({kVerify}, DType::i32);
    session.forward(prompt, logits.view().rows(0, 1), Tensor());
    std::vector<int32_t> block(kVerify);
    for (auto& t : block) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
    // Feeds n tokens, takes the argmax of their logits to the host, keeps `keep` of them.
    auto step = [&](int64_t n, int64_t keep) {
        const int64_t start = session.length();
        session.forward(std::span(block).first(static_cast<size_t>(n)), logits.view().rows(0, n),
                        Tensor());
        be.argmax_rows(logits.view().rows(0, n), argmax.view().rows(0, n));
        be.download(ids.view().rows(0, n), argmax.view().rows(0, n));
        if (keep < n) session.crop(start + keep);
    };
    const double decode = median_seconds(be, kWarmup, steps, [&] { step(1, 1); });
    const double verify = median_seconds(be, kWarmup, steps, [&] { step(kVerify, kVerify); });
    const double rollback = median_seconds(be, kWarmup, steps, [&] { step(kVerify, accept); });
    const Active act = active_params(c);
    const double bytes = static_cast<double>(dtype_size(be.compute_dtype()));
    double kv = 0, state = 0;  // K and V a decode step reads; the linear layers' f32 states
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        if (c.is_linear_layer(l)) {
            state += 2.0 * 4.0 *
                     static_cast<double>(c.linear_num_value_heads * c.linear_key_head_dim *
                                         c.linear_value_head_dim);
        } else {
            kv += 2.0 * static_cast<double>((ctx + 1) * c.num_key_value_heads * c.head_dim) * bytes;
        }
    }
    const double read = (act.layer_params + act.lm_head_params) * bytes + kv + state;
    const double floor = read / kHbmBytesPerS;
    const GraphStats gs = be.graph_stats();
    std::fprintf(stderr,
                 "%-16s decode ctx %lld %-6s %7.3f ms (floor %.3f ms, %.1f%% of HBM)  verify16 "
                 "%7.3f ms (%.2fx decode)  verify16 + rollback to %lld %7.3f ms%s\n",
                 p.name.c_str(), static_cast<long long>(ctx), gs.enabled ? "graphs" : "eager",
                 decode * 1e3, floor * 1e3, 100.0 * floor / decode, verify * 1e3, verify / decode,
                 static_cast<long long>(accept), rollback * 1e3,
                 subset_note(c, full_layers).c_str());
    emit({{"bench", "hybrid_target_decode"},
          {"impl", "dflash"},
          {"preset", p.name},
          {"ctx", ctx},
          {"layers", c.num_hidden_layers},
          {"model_layers", full_layers},
          {"graphs", gs.enabled},
          {"decode_ms", decode * 1e3},
          {"verify16_ms", verify * 1e3},
          {"accepted", accept},
          {"verify16_rollback_ms", rollback * 1e3},
          {"verify_over_decode", verify / decode},
          {"read_floor_ms", floor * 1e3}});
}

void run_preset(Backend& be, const HybridPreset& p, int64_t full_layers,
                const std::vector<int64_t>& seqs, int64_t ctx, int steps, int64_t accept) {
    TargetModel model(be, p.cfg);
    RandomFill fill(be, 0.02f, 3);
    fill(model.params());
    Rng rng(5);
    for (const int64_t seq : seqs) run_forward(be, p, model, seq, steps, full_layers, rng);
    run_decode(be, p, model, ctx, 3 * steps, accept, full_layers, rng);
}

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> out;
    std::stringstream in(s);
    std::string item;
    while (std::getline(in, item, ','))
        if (!item.empty()) out.push_back(std::atoll(item.c_str()));
    return out;
}

}  // namespace
}  // namespace dflash::bench

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    using namespace dflash;
    std::string preset = "all";
    std::vector<int64_t> seqs = {3072, 8192};
    int64_t ctx = 1024, accept = 7, layers = 0;
    int steps = 3;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
        if (!std::strcmp(argv[i], "--seq")) seqs = bench::parse_list(argv[i + 1]);
        if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
        if (!std::strcmp(argv[i], "--accept")) accept = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--layers")) layers = std::atoll(argv[i + 1]);
    }
    try {
        if (resolve_backend("auto") != DeviceKind::cuda) {
            std::printf("hybrid_target_bench: no CUDA device, skipped\n");
            return 0;
        }
        DF_CHECK(accept >= 0 && accept < 16, "--accept {} must be in [0, 16)", accept);
        std::fprintf(stderr,
                     "hybrid targets, one GPU, random bf16 weights (forward: median of %d; decode "
                     "and verify: median of %d)\n",
                     steps, 3 * steps);
        for (const auto& full : bench::presets()) {
            if (preset != "all" && preset != full.name) continue;
            const int64_t L = full.cfg.num_hidden_layers;
            const bench::HybridPreset p =
                layers > 0 && layers < L ? bench::first_layers(full, layers) : full;
            GraphOptions g;
            g.enabled = true;
            auto be = make_backend(DeviceKind::cuda, 0, 2, g);
            bench::run_preset(*be, p, L, seqs, ctx, steps, accept);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "hybrid_target_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

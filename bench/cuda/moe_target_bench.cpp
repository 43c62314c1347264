// Whole mixture-of-experts targets on one GPU: the online training step's target part (a
// 3072-token forward keeping the hidden states of five layers, no LM head) and the bs=1 decode
// step and 16-token verify over a 1024-token cache, at Qwen3-30B-A3B and gpt-oss-20b geometry with
// random bf16 weights. Each against its active-parameter roofline: the forward against the dense
// bf16 peak over its FLOPs (2 x active parameters per token + attention), the decode step against
// HBM over the bytes it must read (attention and router weights, the k experts a token picks, the
// LM head, the KV cache). tools/reference/moe_target_bench.py runs the same workloads with
// transformers. Usage: moe_target_bench [--preset qwen3_30b_a3b|gpt_oss_20b|all] [--seq N]
// [--ctx N] [--steps N]. A table on stderr, one JSON object per case on stdout.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../bench_util.h"
#include "backend/backend_factory.h"
#include "backend/workspace.h"
#include "model/target.h"

namespace dflash::bench {
namespace {

struct MoePreset {
    std::string name;
    TargetConfig cfg;
    std::vector<int64_t> capture;  // the released drafters' target layers (0-based outputs)
};

TargetConfig qwen3_30b_a3b() {
    TargetConfig c = qwen3_shape(48, 2048, 32, 4, 128, 6144, 151936, false);
    c.model_type = "qwen3_moe";
    c.num_experts = 128;
    c.num_experts_per_tok = 8;
    c.moe_intermediate_size = 768;
    c.norm_topk_prob = true;
    c.decoder_sparse_step = 1;
    return c;
}

TargetConfig gpt_oss_20b() {
    TargetConfig c = qwen3_shape(24, 2880, 64, 8, 64, 2880, 201088, false);
    c.model_type = "gpt_oss";
    c.qk_norm = false;
    c.rms_norm_eps = 1e-5;
    c.max_position_embeddings = 131072;
    c.rope.theta = 150000.0;
    c.rope.scaling = RopeScaling();
    c.rope.scaling.type = RopeScalingType::yarn;
    c.rope.scaling.factor = 32.0;
    c.rope.scaling.original_max_position = 4096;
    c.rope.scaling.truncate = false;
    c.attention_bias = true;
    c.attention_sinks = true;
    c.num_experts = 32;
    c.num_experts_per_tok = 4;
    c.moe_intermediate_size = 2880;
    c.norm_topk_prob = true;
    c.swiglu_limit = 7.0;
    c.sliding_window = 128;
    for (int i = 0; i < 24; ++i)
        c.layer_types.emplace_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    return c;
}

std::vector<MoePreset> presets() {
    return {{"qwen3_30b_a3b", qwen3_30b_a3b(), {1, 12, 23, 34, 45}},
            {"gpt_oss_20b", gpt_oss_20b(), {1, 6, 11, 16, 21}}};
}

// Parameters a token touches: everything but the experts it does not pick and the embedding rows
// it does not read (the LM head is counted by the decode floor only: the forward has none).
struct Active {
    double layer_params = 0;  // attention + router + k experts, all layers
    double lm_head_params = 0;
};

Active active_params(const TargetConfig& c) {
    const double D = static_cast<double>(c.hidden_size);
    const double H = static_cast<double>(c.num_attention_heads);
    const double Hkv = static_cast<double>(c.num_key_value_heads);
    const double Dh = static_cast<double>(c.head_dim);
    const double attn = D * Dh * (2 * H + 2 * Hkv);
    const double E = static_cast<double>(c.num_experts);
    const double k = static_cast<double>(c.num_experts_per_tok);
    const double Ie = static_cast<double>(c.moe_intermediate_size);
    const double per_layer = attn + E * D + k * 3 * D * Ie;
    return {per_layer * static_cast<double>(c.num_hidden_layers),
            static_cast<double>(c.vocab_size) * D};
}

// Attention FLOPs of a causal forward of S tokens (QK^T and PV; sliding layers see <= window keys).
double attention_flops(const TargetConfig& c, int64_t S) {
    double f = 0;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const int64_t w = c.layer_window(l);
        double pairs = 0;
        for (int64_t i = 0; i < S; ++i)
            pairs += static_cast<double>(w > 0 ? std::min(i + 1, w) : i + 1);
        f += 4.0 * pairs * static_cast<double>(c.num_attention_heads * c.head_dim);
    }
    return f;
}

void run_preset(Backend& be, const MoePreset& p, int64_t seq, int64_t ctx, int steps) {
    const TargetConfig& c = p.cfg;
    TargetModel model(be, c);
    RandomFill fill(be, 0.02f, 3);
    fill(model.params());
    Rng rng(5);
    const Active act = active_params(c);
    const double bytes = static_cast<double>(dtype_size(be.compute_dtype()));

    // The training step's target part: features of five layers, no final norm or LM head.
    {
        std::vector<int32_t> tokens(static_cast<size_t>(seq));
        for (auto& t : tokens)
            t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
        const int64_t K = static_cast<int64_t>(p.capture.size());
        DeviceTensor features(be, {seq, K * c.hidden_size}, be.compute_dtype());
        auto body = [&](Backend& b, Workspace& w) {
            model.forward(b, w, tokens, p.capture, features.view(), Tensor());
        };
        Workspace ws(be, plan_workspace(be, body));
        auto step = [&] {
            ws.reset();
            body(be, ws);
        };
        const double t = median_seconds(be, 2, steps, step);
        const double flops =
            2.0 * act.layer_params * static_cast<double>(seq) + attention_flops(c, seq);
        const double floor = flops / (kPeakTflops * 1e12);
        std::fprintf(stderr,
                     "%-14s forward %lld tok  %8.2f ms  %6.1f TFLOP/s (%4.1f%% of peak; floor "
                     "%.2f ms)  workspace %.2f GB\n",
                     p.name.c_str(), static_cast<long long>(seq), t * 1e3, flops / t * 1e-12,
                     100.0 * floor / t, floor * 1e3,
                     static_cast<double>(ws.high_water().device_bytes) * 1e-9);
        emit({{"bench", "moe_target_forward"},
              {"impl", "dflash"},
              {"preset", p.name},
              {"seq", seq},
              {"ms", t * 1e3},
              {"tflops", flops / t * 1e-12},
              {"flop_floor_ms", floor * 1e3},
              {"active_layer_params", act.layer_params},
              {"workspace_bytes", ws.high_water().device_bytes}});
    }

    // bs=1 decode and a 16-token verify over ctx cached tokens, the argmax back on the host.
    {
        constexpr int64_t kVerify = 16;
        TargetSession session(model, be, ctx + kVerify + 1, {}, 512);
        std::vector<int32_t> prompt(static_cast<size_t>(ctx));
        for (auto& t : prompt)
            t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
        DeviceTensor logits(be, {kVerify, c.vocab_size}, DType::f32);
        DeviceTensor argmax(be, {kVerify}, DType::i32);
        HostTensor ids({kVerify}, DType::i32);
        session.forward(prompt, logits.view().rows(0, 1), Tensor());
        std::vector<int32_t> block(kVerify);
        for (auto& t : block)
            t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.vocab_size)));
        auto step = [&](int64_t n) {
            session.forward(std::span(block).first(static_cast<size_t>(n)),
                            logits.view().rows(0, n), Tensor());
            be.argmax_rows(logits.view().rows(0, n), argmax.view().rows(0, n));
            be.download(ids.view().rows(0, n), argmax.view().rows(0, n));
            session.crop(ctx);
        };
        const double decode = median_seconds(be, 5, steps, [&] { step(1); });
        const double verify = median_seconds(be, 5, steps, [&] { step(kVerify); });
        double kv = 0;  // K and V rows a decode step reads
        for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
            const int64_t w = c.layer_window(l);
            kv += 2.0 * static_cast<double>((w > 0 ? std::min(ctx + 1, w) : ctx + 1) *
                                            c.num_key_value_heads * c.head_dim);
        }
        const double read = (act.layer_params + act.lm_head_params + kv) * bytes;
        const double floor = read / kHbmBytesPerS;
        const GraphStats gs = be.graph_stats();
        std::fprintf(stderr,
                     "%-14s decode ctx %lld %-6s %7.3f ms (active floor %.3f ms, %.1f%% of HBM)  "
                     "verify16 %7.3f ms (%.2fx decode)\n",
                     p.name.c_str(), static_cast<long long>(ctx), gs.enabled ? "graphs" : "eager",
                     decode * 1e3, floor * 1e3, 100.0 * floor / decode, verify * 1e3,
                     verify / decode);
        emit({{"bench", "moe_target_decode"},
              {"impl", "dflash"},
              {"preset", p.name},
              {"ctx", ctx},
              {"graphs", gs.enabled},
              {"decode_ms", decode * 1e3},
              {"verify16_ms", verify * 1e3},
              {"verify_over_decode", verify / decode},
              {"active_read_floor_ms", floor * 1e3}});
    }
}

}  // namespace
}  // namespace dflash::bench

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    using namespace dflash;
    std::string preset = "all";
    int64_t seq = 3072, ctx = 1024;
    int steps = 10;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--preset")) preset = argv[i + 1];
        if (!std::strcmp(argv[i], "--seq")) seq = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--ctx")) ctx = std::atoll(argv[i + 1]);
        if (!std::strcmp(argv[i], "--steps")) steps = std::atoi(argv[i + 1]);
    }
    try {
        if (resolve_backend("auto") != DeviceKind::cuda) {
            std::printf("moe_target_bench: no CUDA device, skipped\n");
            return 0;
        }
        std::fprintf(stderr, "MoE targets, one GPU, random bf16 weights (median of %d)\n", steps);
        for (const auto& p : bench::presets()) {
            if (preset != "all" && preset != p.name) continue;
            GraphOptions g;
            g.enabled = true;
            auto be = make_backend(DeviceKind::cuda, 0, 2, g);
            bench::run_preset(*be, p, seq, ctx, steps);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "moe_target_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

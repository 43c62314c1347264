// Mixture-of-experts benchmark on the GPU (Backend::moe_route / moe_experts, backend/cuda/moe.cpp)
// at the MoE blocks of Qwen3-30B-A3B (D 2048, I 768, 128 experts, top-8, SwiGLU) and gpt-oss-20b
// (D 2880, I 2880, 32 experts, top-4, clamped SwiGLU with biases): decode and verify (1, 4, 16
// tokens) and a 3072-token prefill, routed by moe_route on random logits. Prints a table: median
// of 20 timed runs (host wall time to a synchronize, so launch costs count, as they do in a
// decode step); for moe_experts the expert weights read (each expert some token picked, once) in
// GB/s against the HBM copy bandwidth and the products' TFLOP/s against the bf16 peak
// (bench/bench_util.h). Then gpt-oss-120b's experts as MXFP4 (128 experts, top-4, D 2880,
// I 2880, 36 layers: 61 GB of blocks and scales in GPU memory, decoded inside the expert GEMMs):
// the expert blocks of a whole decode step (1 token through the 36 layers, each layer its own
// routing) and of a 3072-token forward, against the MXFP4 floor (the distinct experts' blocks,
// scales and biases read once, at the HBM copy bandwidth). Skips with a message when there is no
// GPU. Correctness is tests/cuda/moe_cuda_test.cpp's job.
#include <cstdio>
#include <memory>
#include <set>
#include <vector>

#include "../bench_util.h"
#include "backend/backend_factory.h"
#include "core/rng.h"

namespace dflash {
namespace {

constexpr int kWarmup = 3;
constexpr int kRuns = 20;

struct Model {
    const char* name;
    int64_t D, I, E, k;
    MoeRouterKind router;
    MoeActivation act;
    bool biases;
};

void bench_model(Backend& be, const Model& m) {
    bench::RandomFill fill(be, 0.02f, 7);
    DeviceTensor gate_up(be, {m.E, 2 * m.I, m.D}, DType::bf16),
        down(be, {m.E, m.D, m.I}, DType::bf16);
    DeviceTensor gate_up_bias, down_bias;
    fill(gate_up);
    fill(down);
    MoeExperts w;
    w.gate_up = gate_up;
    w.down = down;
    if (m.biases) {
        gate_up_bias = DeviceTensor(be, {m.E, 2 * m.I}, DType::bf16);
        down_bias = DeviceTensor(be, {m.E, m.D}, DType::bf16);
        fill(gate_up_bias);
        fill(down_bias);
        w.gate_up_bias = gate_up_bias;
        w.down_bias = down_bias;
    }
    w.activation = m.act;
    const MoeRouting routing{m.router, m.k, true};
    bench::RandomFill logit_fill(be, 1.0f, 11);
    for (const int64_t R : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{3072}}) {
        DeviceTensor logits(be, {R, m.E}, DType::f32), x(be, {R, m.D}, DType::bf16);
        DeviceTensor ids(be, {R, m.k}, DType::i32), wts(be, {R, m.k}, DType::f32);
        DeviceTensor out(be, {R, m.D}, DType::bf16);
        logit_fill(logits);
        fill(x);
        const double route_s = bench::median_seconds(
            be, kWarmup, kRuns, [&] { be.moe_route(logits, routing, ids, wts); });
        HostTensor host_ids({R, m.k}, DType::i32);
        be.download(host_ids, ids);
        const std::set<int32_t> used(host_ids.i32(), host_ids.i32() + host_ids.numel());
        const double s =
            bench::median_seconds(be, kWarmup, kRuns, [&] { be.moe_experts(x, ids, wts, w, out); });
        const double bytes = static_cast<double>(used.size()) * 3.0 * m.D * m.I * 2.0;
        const double flops = 2.0 * 3.0 * static_cast<double>(R * m.k) * m.D * m.I;
        const double gbs = bytes / s / 1e9, tflops = flops / s / 1e12;
        std::printf("%-14s %6lld %8zu %10.4f %10.4f %9.1f %6.1f%% %8.1f %6.1f%%\n", m.name,
                    static_cast<long long>(R), used.size(), route_s * 1e3, s * 1e3, gbs,
                    100.0 * gbs * 1e9 / bench::kHbmBytesPerS, tflops,
                    100.0 * tflops / bench::kPeakTflops);
    }
}

// Every layer's MXFP4 experts in device memory: one host draw of random codes (any byte) and
// scales (2^-8 .. 2^-1, weights of a trained model's size), uploaded into every layer.
struct Mxfp4Stack {
    std::vector<DeviceTensor> gu_blocks, gu_scales, dn_blocks, dn_scales, gu_bias, dn_bias;
};

Mxfp4Stack make_mxfp4_stack(Backend& be, int64_t L, int64_t E, int64_t D, int64_t I) {
    Rng rng(5);
    const auto host_bytes = [&](Shape shape, int lo, int hi) {
        HostTensor h(shape, DType::u8);
        for (int64_t i = 0; i < h.numel(); ++i)
            h.view().u8()[i] = static_cast<uint8_t>(lo + static_cast<int>(rng.below(hi - lo + 1)));
        return h;
    };
    const HostTensor gub = host_bytes({E, 2 * I, D / 32, 16}, 0, 255);
    const HostTensor gus = host_bytes({E, 2 * I, D / 32}, 119, 126);
    const HostTensor dnb = host_bytes({E, D, I / 32, 16}, 0, 255);
    const HostTensor dns = host_bytes({E, D, I / 32}, 119, 126);
    bench::RandomFill fill(be, 0.02f, 13);
    Mxfp4Stack s;
    const auto up = [&](std::vector<DeviceTensor>& v, const HostTensor& h) {
        v.emplace_back(be, h.shape(), DType::u8);
        be.upload(v.back(), h);
    };
    for (int64_t l = 0; l < L; ++l) {
        up(s.gu_blocks, gub);
        up(s.gu_scales, gus);
        up(s.dn_blocks, dnb);
        up(s.dn_scales, dns);
        s.gu_bias.emplace_back(be, Shape{E, 2 * I}, DType::bf16);
        s.dn_bias.emplace_back(be, Shape{E, D}, DType::bf16);
        fill(s.gu_bias.back());
        fill(s.dn_bias.back());
        be.synchronize();  // the host draws are uploaded from pageable memory
    }
    return s;
}

void bench_mxfp4_model(Backend& be, const char* name, int64_t L, int64_t E, int64_t k, int64_t D,
                       int64_t I) {
    const Mxfp4Stack st = make_mxfp4_stack(be, L, E, D, I);
    std::vector<MoeExperts> ws(static_cast<size_t>(L));
    for (int64_t l = 0; l < L; ++l) {
        MoeExperts& w = ws[static_cast<size_t>(l)];
        w.gate_up_blocks = st.gu_blocks[l];
        w.gate_up_scales = st.gu_scales[l];
        w.down_blocks = st.dn_blocks[l];
        w.down_scales = st.dn_scales[l];
        w.gate_up_bias = st.gu_bias[l];
        w.down_bias = st.dn_bias[l];
        w.activation = MoeActivation::clamped_swiglu;
    }
    // Bytes of one expert read once: blocks and scales (17 bytes per 32 weights), bf16 biases.
    const double expert_bytes = 3.0 * D * I / 32.0 * 17.0 + (2.0 * I + D) * 2.0;
    const MoeRouting routing{MoeRouterKind::topk_softmax, k, true};
    bench::RandomFill fill(be, 0.02f, 17), logit_fill(be, 1.0f, 19);
    for (const int64_t R : {int64_t{1}, int64_t{16}, int64_t{3072}}) {
        DeviceTensor x(be, {R, D}, DType::bf16), out(be, {R, D}, DType::bf16);
        fill(x);
        // Each layer routes its own random logits (a decode step's layers pick other experts).
        std::vector<DeviceTensor> ids, wts;
        double distinct = 0;
        for (int64_t l = 0; l < L; ++l) {
            DeviceTensor logits(be, {R, E}, DType::f32);
            logit_fill(logits);
            ids.emplace_back(be, Shape{R, k}, DType::i32);
            wts.emplace_back(be, Shape{R, k}, DType::f32);
            be.moe_route(logits, routing, ids.back(), wts.back());
            HostTensor h({R, k}, DType::i32);
            be.download(h, ids.back());
            distinct += static_cast<double>(std::set<int32_t>(h.i32(), h.i32() + h.numel()).size());
        }
        const double s = bench::median_seconds(be, kWarmup, kRuns, [&] {
            for (int64_t l = 0; l < L; ++l)
                be.moe_experts(x, ids[l], wts[l], ws[static_cast<size_t>(l)], out);
        });
        const double bytes = distinct * expert_bytes;
        const double floor_s = bytes / bench::kHbmBytesPerS;
        const double tflops = 2.0 * 3.0 * static_cast<double>(L * R * k) * D * I / s / 1e12;
        std::printf("%-14s %6lld %8.0f %10.3f %10.3f %9.1f %6.1f%% %8.1f %6.1f%%\n", name,
                    static_cast<long long>(R), distinct, s * 1e3, floor_s * 1e3, bytes / s / 1e9,
                    100.0 * floor_s / s, tflops, 100.0 * tflops / bench::kPeakTflops);
    }
}

int run() {
    if (cuda_device_count() == 0) {
        std::printf("moe_bench: no CUDA device, skipped\n");
        return 0;
    }
    const std::unique_ptr<Backend> be = make_backend(DeviceKind::cuda, 0, 1);
    std::printf("%s; median of %d runs\n", be->name().c_str(), kRuns);
    std::printf("%-14s %6s %8s %10s %10s %9s %7s %8s %7s\n", "model", "tokens", "experts",
                "route ms", "experts ms", "GB/s", "% HBM", "TFLOP/s", "% peak");
    bench_model(*be, {"qwen3-30b-a3b", 2048, 768, 128, 8, MoeRouterKind::softmax_topk,
                      MoeActivation::swiglu, false});
    bench_model(*be, {"gpt-oss-20b", 2880, 2880, 32, 4, MoeRouterKind::topk_softmax,
                      MoeActivation::clamped_swiglu, true});
    std::printf(
        "\nMXFP4 experts, all layers of a step (experts: distinct experts summed over "
        "the layers; floor: their MXFP4 bytes at the HBM copy bandwidth)\n");
    std::printf("%-14s %6s %8s %10s %10s %9s %7s %8s %7s\n", "model", "tokens", "experts",
                "step ms", "floor ms", "GB/s", "% floor", "TFLOP/s", "% peak");
    bench_mxfp4_model(*be, "gpt-oss-120b", 36, 128, 4, 2880, 2880);
    return 0;
}

}  // namespace
}  // namespace dflash

int main() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    try {
        return dflash::run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "moe_bench: %s\n", e.what());
        return 1;
    }
}

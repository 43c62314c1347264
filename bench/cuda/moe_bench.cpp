// Mixture-of-experts benchmark on the GPU (Backend::moe_route / moe_experts, backend/cuda/moe.cpp)
// at the MoE blocks of Qwen3-30B-A3B (D 2048, I 768, 128 experts, top-8, SwiGLU) and gpt-oss-20b
// (D 2880, I 2880, 32 experts, top-4, clamped SwiGLU with biases): decode and verify (1, 4, 16
// tokens) and a 3072-token prefill, routed by moe_route on random logits. Prints a table: median
// of 20 timed runs (host wall time to a synchronize, so launch costs count, as they do in a
// decode step); for moe_experts the expert weights read (each expert some token picked, once) in
// GB/s against the HBM copy bandwidth and the products' TFLOP/s against the bf16 peak
// (bench/bench_util.h). Skips with a message when there is no GPU. Correctness is
// tests/cuda/moe_cuda_test.cpp's job.
#include <cstdio>
#include <set>
#include <vector>

#include "../bench_util.h"
#include "backend/backend_factory.h"

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

// Gated DeltaNet benchmark on the GPU (Backend::gdn_chunked / gdn_recurrent, backend/cuda/gdn.cpp)
// at the linear-attention layers of Qwen3.5-27B (Hk 16, Hv 48) and Qwen3.5-35B-A3B (Hk 16, Hv 32),
// dk = dv = 128: gdn_chunked on 3072- and 8192-token prefills, gdn_recurrent on a decode token
// and a 16-token verify block. Inputs come from gdn_prepare on random projections (unit-norm
// keys, gates and betas of a real layer's range). Prints the median of 20 timed runs (host wall
// time to a synchronize, so launch costs count) with the achieved TFLOP/s and GB/s next to the
// floors below. Skips with a message when there is no GPU. Correctness is
// tests/cuda/gdn_cuda_test.cpp's job.
//
// The floors, per layer, for T tokens, Hk key heads, Hv value heads, dk = dv = d, chunk C = 64:
//   bytes: what must cross HBM at least once: q and k (2 T Hk d), v and o (2 T Hv d), g and beta
//     (2 T Hv), all f32, plus the state read and written (2 Hv d^2 f32):
//       bytes = 4 (2 T Hk d + 2 T Hv d + 2 T Hv + 2 Hv d^2).
//   FLOPs of the chunked form, per token and value head (multiply-add = 2): the chunk's Gram
//     matrices K K^T and Q K^T (2 * 2 C d), the triangular solve for W and U (C (dk + dv) = 2 C d),
//     the products with the state W S, Q S and K^T V' (3 * 2 d^2) and P V' (C d, lower half):
//       flops_chunked = T Hv (4 C d + 2 C d + 6 d^2 + C d) = T Hv (7 C d + 6 d^2).
//     At d = 128: 155,648 per token and head, 61 GFLOP for Qwen3.5-27B at T = 8192.
//   FLOPs of the recurrent form (decay, S^T k, the rank-1 update, S^T q): 7 d^2 per token and
//     head; for a decode step the bytes (the state, 2 Hv d^2 f32 = 6.3 MB at Hv 48) dominate: the
//     floor is ~1.5 us at the HBM copy rate.
// The percentages compare against the HBM copy rate and the f32 peak of CUDA cores (the kernels
// use no tensor cores yet); the bf16 tensor-core peak is in bench/bench_util.h.
#include <cstdio>
#include <vector>

#include "../bench_util.h"
#include "backend/backend_factory.h"

namespace dflash {
namespace {

constexpr int kWarmup = 3;
constexpr int kRuns = 20;
constexpr int64_t kDim = 128;
constexpr int64_t kChunk = 64;
// The H200's f32 FMA peak on CUDA cores (132 SMs x 128 lanes x 2 x 1.98 GHz).
constexpr double kF32PeakTflops = 66.9;

struct Model {
    const char* name;
    int64_t Hk, Hv;
};

struct Inputs {
    DeviceTensor q, k, v, g, beta, state, o;
};

Inputs make_inputs(Backend& be, const Model& m, int64_t T) {
    const int64_t d = kDim, C = 2 * m.Hk * d + m.Hv * d;
    bench::RandomFill fill(be, 1.0f, 5);
    DeviceTensor conv_out(be, {T, C}, DType::bf16), b(be, {T, m.Hv}, DType::bf16),
        a(be, {T, m.Hv}, DType::bf16), a_log(be, {m.Hv}, DType::f32),
        dt_bias(be, {m.Hv}, DType::f32);
    fill(conv_out);
    fill(b);
    fill(a);
    be.fill(a_log, -1.0f);  // exp(g) mostly 0.5 .. 0.95, as in trained layers
    be.fill(dt_bias, 0.0f);
    Inputs in{
        DeviceTensor(be, {T, m.Hk, d}, DType::f32), DeviceTensor(be, {T, m.Hk, d}, DType::f32),
        DeviceTensor(be, {T, m.Hv, d}, DType::f32), DeviceTensor(be, {T, m.Hv}, DType::f32),
        DeviceTensor(be, {T, m.Hv}, DType::f32),    DeviceTensor(be, {m.Hv, d, d}, DType::f32),
        DeviceTensor(be, {T, m.Hv, d}, DType::f32)};
    be.gdn_prepare(conv_out, b, a, a_log, dt_bias, in.q, in.k, in.v, in.g, in.beta);
    be.synchronize();
    return in;
}

double floor_bytes(const Model& m, int64_t T) {
    const double d = kDim;
    return 4.0 * (2.0 * T * m.Hk * d + 2.0 * T * m.Hv * d + 2.0 * T * m.Hv + 2.0 * m.Hv * d * d);
}

void report(const Model& m, const char* op, int64_t T, double s, double flops, double bytes) {
    const double tflops = flops / s / 1e12, gbs = bytes / s / 1e9;
    std::printf("%-16s %-10s %6lld %10.4f %9.2f %6.1f%% %9.1f %6.1f%%\n", m.name, op,
                static_cast<long long>(T), s * 1e3, tflops, 100.0 * tflops / kF32PeakTflops, gbs,
                100.0 * gbs * 1e9 / bench::kHbmBytesPerS);
}

void bench_model(Backend& be, const Model& m) {
    const double d = kDim;
    for (const int64_t T : {int64_t{3072}, int64_t{8192}}) {
        Inputs in = make_inputs(be, m, T);
        const double s = bench::median_seconds(be, kWarmup, kRuns, [&] {
            be.gdn_chunked(in.q, in.k, in.v, in.g, in.beta, in.state, in.o);
        });
        const double flops = static_cast<double>(T) * m.Hv * (7.0 * kChunk * d + 6.0 * d * d);
        report(m, "chunked", T, s, flops, floor_bytes(m, T));
    }
    for (const int64_t T : {int64_t{1}, int64_t{16}}) {
        Inputs in = make_inputs(be, m, T);
        const double s = bench::median_seconds(be, kWarmup, kRuns, [&] {
            be.gdn_recurrent(in.q, in.k, in.v, in.g, in.beta, in.state, in.o, Tensor{});
        });
        const double flops = static_cast<double>(T) * m.Hv * 7.0 * d * d;
        report(m, "recurrent", T, s, flops, floor_bytes(m, T));
    }
}

int run() {
    if (cuda_device_count() == 0) {
        std::printf("gdn_bench: no CUDA device, skipped\n");
        return 0;
    }
    const std::unique_ptr<Backend> be = make_backend(DeviceKind::cuda, 0, 1);
    std::printf("%s; median of %d runs; dk = dv = %lld\n", be->name().c_str(), kRuns,
                static_cast<long long>(kDim));
    std::printf("%-16s %-10s %6s %10s %9s %7s %9s %7s\n", "model", "op", "tokens", "ms", "TFLOP/s",
                "% f32", "GB/s", "% HBM");
    bench_model(*be, {"qwen3.5-27b", 16, 48});
    bench_model(*be, {"qwen3.5-35b-a3b", 16, 32});
    return 0;
}

}  // namespace
}  // namespace dflash

int main() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    try {
        return dflash::run();
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gdn_bench: %s\n", e.what());
        return 1;
    }
}

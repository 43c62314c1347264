// GEMM throughput of the CUDA backend's GemmEngine (cuBLASLt) on the transformer shapes the models
// issue (src/model/decoder_layer.cpp: q, k, v, o, gate, up, down; forward, dX = dY · W and
// dW += dYᵀ · X with f32 dW), at hidden 1024 / 2048 / 4096 (Qwen3-0.6B / 1.7B / 8B geometry) and
// 16K tokens, plus the LM head at V = 151,936 (full-vocabulary logits and the per-chunk GEMMs of
// lm_head_ce). Prints time (median of 25 runs timed with cudaEvents after warm-up), TFLOP/s and
// the share of the ~790 TFLOP/s bf16 ceiling (docs/performance.md), and a layer-weighted total
// per hidden size. Usage: gemm_bench [tokens]. Skips with a message when no GPU is present.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm.h"

namespace dflash {
namespace {

constexpr double kCeilingTflops = 790.0;
constexpr int kWarmup = 3;
constexpr int kRuns = 25;

struct Geometry {
    int64_t hidden, heads, kv_heads, head_dim, intermediate;
};

struct Gemm {
    std::string name;
    int64_t m, n, k;
    bool ta, tb;
    DType c;
    float beta;
};

// A linear layer y [T, out] = x [T, in] · W[out, in]ᵀ and its two backward GEMMs.
void linear(std::vector<Gemm>& g, const std::string& name, int64_t t, int64_t in, int64_t out,
            float fwd_beta) {
    g.push_back({name + " fwd", t, out, in, false, true, DType::bf16, fwd_beta});
    g.push_back({name + " dX", t, in, out, false, false, DType::bf16, 0.0f});
    g.push_back({name + " dW", out, in, t, true, false, DType::f32, 1.0f});
}

std::vector<Gemm> layer_gemms(const Geometry& geo, int64_t t) {
    std::vector<Gemm> g;
    const int64_t q = geo.heads * geo.head_dim, kv = geo.kv_heads * geo.head_dim;
    linear(g, "q", t, geo.hidden, q, 0.0f);
    linear(g, "k", t, geo.hidden, kv, 0.0f);
    linear(g, "v", t, geo.hidden, kv, 0.0f);
    linear(g, "o", t, q, geo.hidden, 1.0f);  // residual fused (beta = 1)
    linear(g, "gate", t, geo.hidden, geo.intermediate, 0.0f);
    linear(g, "up", t, geo.hidden, geo.intermediate, 0.0f);
    linear(g, "down", t, geo.intermediate, geo.hidden, 1.0f);
    return g;
}

std::vector<Gemm> lm_head_gemms(int64_t hidden, int64_t t, int64_t vocab, int64_t chunk) {
    return {{"lm_head logits full V (bf16)", t, vocab, hidden, false, true, DType::bf16, 0.0f},
            {"lm_head chunk logits (f32)", t, chunk, hidden, false, true, DType::f32, 0.0f},
            {"lm_head chunk dh += P·w", t, hidden, chunk, false, false, DType::f32, 1.0f},
            {"lm_head chunk dw += gᵀ·h", chunk, hidden, t, true, false, DType::f32, 1.0f}};
}

struct Bench {
    cudaStream_t stream = nullptr;
    cuda::GemmEngine* engine = nullptr;
    void* pool = nullptr;  // random bf16 operands (read-only, shared by A and B)
    size_t pool_elems = 0;
    void* out = nullptr;  // C
    size_t out_bytes = 0;
};

double flops(const Gemm& g) {
    return 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) * static_cast<double>(g.k);
}

// Median milliseconds of one GEMM.
double time_gemm(const Bench& b, const Gemm& g) {
    const DeviceRef dev{DeviceKind::cuda, 0};
    const size_t a_elems = static_cast<size_t>(g.m * g.k), b_elems = static_cast<size_t>(g.k * g.n);
    const size_t c_bytes = static_cast<size_t>(g.m * g.n) * dtype_size(g.c);
    if (a_elems > b.pool_elems || b_elems > b.pool_elems || c_bytes > b.out_bytes) {
        std::fprintf(stderr, "gemm_bench: %s does not fit the buffers\n", g.name.c_str());
        std::exit(1);
    }
    auto* pool = static_cast<uint16_t*>(b.pool);
    const Tensor a(pool, DType::bf16, g.ta ? Shape{g.k, g.m} : Shape{g.m, g.k}, dev);
    // B starts elsewhere in the pool (same alignment) so A and B are not the same memory.
    const size_t b_off = (b.pool_elems - b_elems) / 128 * 128;
    const Tensor bt(pool + b_off, DType::bf16, g.tb ? Shape{g.n, g.k} : Shape{g.k, g.n}, dev);
    const Tensor c(b.out, g.c, Shape{g.m, g.n}, dev);
    cuda::Exec ex;
    ex.stream = b.stream;
    ex.gemm = b.engine;
    for (int i = 0; i < kWarmup; ++i) cuda::gemm(ex, a, g.ta, bt, g.tb, c, 1.0f, g.beta);
    std::vector<cudaEvent_t> ev(kRuns + 1);
    for (auto& e : ev) DF_CUDA_CHECK(cudaEventCreate(&e));
    DF_CUDA_CHECK(cudaEventRecord(ev[0], b.stream));
    for (int i = 0; i < kRuns; ++i) {
        cuda::gemm(ex, a, g.ta, bt, g.tb, c, 1.0f, g.beta);
        DF_CUDA_CHECK(cudaEventRecord(ev[i + 1], b.stream));
    }
    DF_CUDA_CHECK(cudaStreamSynchronize(b.stream));
    std::vector<double> ms(kRuns);
    for (int i = 0; i < kRuns; ++i) {
        float t = 0;
        DF_CUDA_CHECK(cudaEventElapsedTime(&t, ev[i], ev[i + 1]));
        ms[i] = t;
    }
    for (auto& e : ev) DF_CUDA_CHECK(cudaEventDestroy(e));
    std::nth_element(ms.begin(), ms.begin() + kRuns / 2, ms.end());
    return ms[kRuns / 2];
}

void print_row(const Gemm& g, double ms) {
    const double tf = flops(g) / (ms * 1e-3) / 1e12;
    std::printf("  %-30s %6lld %6lld %6lld  %s%s  %-4s %9.3f ms %7.1f TFLOP/s %5.1f%%\n",
                g.name.c_str(), static_cast<long long>(g.m), static_cast<long long>(g.n),
                static_cast<long long>(g.k), g.ta ? "T" : "N", g.tb ? "T" : "N",
                std::string(dtype_name(g.c)).c_str(), ms, tf, 100.0 * tf / kCeilingTflops);
}

// Sums flops and time over a list: the layer-weighted figure.
void run_list(const Bench& b, const std::string& title, const std::vector<Gemm>& list) {
    std::printf("%s\n  %-30s %6s %6s %6s  %-2s  %-4s %12s %15s %6s\n", title.c_str(), "gemm", "m",
                "n", "k", "op", "C", "median", "rate", "ceil");
    double total_flops = 0, total_ms = 0;
    for (const Gemm& g : list) {
        const double ms = time_gemm(b, g);
        print_row(g, ms);
        total_flops += flops(g);
        total_ms += ms;
    }
    const double tf = total_flops / (total_ms * 1e-3) / 1e12;
    std::printf("  %-30s %43.3f ms %7.1f TFLOP/s %5.1f%%  (flop-weighted over the list)\n\n",
                "TOTAL", total_ms, tf, 100.0 * tf / kCeilingTflops);
}

int run(int64_t tokens) {
    const std::vector<Geometry> geos = {
        {1024, 16, 8, 128, 3072}, {2048, 16, 8, 128, 6144}, {4096, 32, 8, 128, 12288}};
    const int64_t vocab = 151936, chunk = 8192;
    Bench b;
    DF_CUDA_CHECK(cudaSetDevice(0));
    DF_CUDA_CHECK(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking));
    cuda::GemmEngine engine;
    b.engine = &engine;
    // Operands up to [tokens, 12288] or the [V, 4096] head in bf16; outputs up to the
    // full-vocabulary logits in bf16.
    b.pool_elems =
        std::max<size_t>(static_cast<size_t>(tokens) * 12288, static_cast<size_t>(vocab) * 4096);
    b.out_bytes = static_cast<size_t>(tokens) * vocab * 2;
    DF_CUDA_CHECK(cudaMalloc(&b.pool, b.pool_elems * 2));
    DF_CUDA_CHECK(cudaMalloc(&b.out, b.out_bytes));
    DF_CUDA_CHECK(cudaMemset(b.out, 0, b.out_bytes));
    {
        // Values uniform in [-1, 1), rounded to bf16: a 16M-element block made on the host and
        // repeated over the pool (the values do not change the time, as long as they are finite).
        const size_t block = size_t{1} << 24;
        std::vector<uint16_t> host(block);
        uint64_t s = 0x9e3779b97f4a7c15ull;
        for (auto& x : host) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            const float u = static_cast<float>((s >> 40) & 0xffffff) / 16777216.0f;
            x = f32_to_bf16(2.0f * u - 1.0f);
        }
        auto* pool = static_cast<uint16_t*>(b.pool);
        for (size_t at = 0; at < b.pool_elems; at += block) {
            const size_t n = std::min(block, b.pool_elems - at);
            DF_CUDA_CHECK(cudaMemcpy(pool + at, host.data(), n * 2, cudaMemcpyHostToDevice));
        }
    }
    std::printf("gemm_bench: %lld tokens, median of %d runs, ceiling %.0f TFLOP/s (bf16 dense)\n\n",
                static_cast<long long>(tokens), kRuns, kCeilingTflops);
    for (const Geometry& geo : geos) {
        run_list(b,
                 "hidden " + std::to_string(geo.hidden) + " (heads " + std::to_string(geo.heads) +
                     "/" + std::to_string(geo.kv_heads) + " x " + std::to_string(geo.head_dim) +
                     ", intermediate " + std::to_string(geo.intermediate) + "): one layer",
                 layer_gemms(geo, tokens));
    }
    for (const Geometry& geo : geos) {
        run_list(b,
                 "LM head, hidden " + std::to_string(geo.hidden) + ", V " + std::to_string(vocab),
                 lm_head_gemms(geo.hidden, tokens, vocab, chunk));
    }
    std::printf("plans cached: %lld, calls: %lld\n", static_cast<long long>(engine.plans()),
                static_cast<long long>(engine.calls()));
    DF_CUDA_CHECK(cudaFree(b.out));
    DF_CUDA_CHECK(cudaFree(b.pool));
    DF_CUDA_CHECK(cudaStreamDestroy(b.stream));
    return 0;
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    if (dflash::cuda_device_count() == 0) {
        std::printf("gemm_bench: no CUDA device, skipping\n");
        return 0;
    }
    const int64_t tokens = argc > 1 ? std::atoll(argv[1]) : 16384;
    try {
        return dflash::run(tokens);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "gemm_bench: %s\n", e.what());
        return 1;
    }
}

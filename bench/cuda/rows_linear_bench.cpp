// The decode block's products (Backend::rows_linear) against the same products through the
// general gemm (cuBLASLt, its 16-row plan), at the Qwen3-0.6B and Qwen3-8B decode shapes: q/k/v
// side by side, o_proj with the residual, gate/up with SwiGLU, down with the residual, the LM head
// in f32; 1 and 16 rows. Each figure is the median over 7 runs of 100 back-to-back calls, divided
// by 100 (launches queue ahead of the GPU), and the weights' bytes over that time as a share of
// the 4.24 TB/s HBM copy ceiling (docs/performance.md). A table on stderr, JSON lines on stdout.
// Usage: rows_linear_bench. Skips with a message when no GPU is present.
#include <cstdio>
#include <string>
#include <vector>

#include "../bench_util.h"
#include "backend/backend_factory.h"

namespace dflash::bench {
namespace {

struct Shape {
    std::string model, name;
    int64_t k;
    std::vector<int64_t> n;  // the weights' rows
    RowsEpilogue ep;
    bool f32_out = false;
};

std::vector<Shape> shapes() {
    std::vector<Shape> s;
    struct Geo {
        std::string name;
        int64_t d, q, kv, inter, vocab;
    };
    for (const Geo& g : {Geo{"qwen3_0_6b", 1024, 2048, 1024, 3072, 151936},
                         Geo{"qwen3_8b", 4096, 4096, 1024, 12288, 151936}}) {
        s.push_back({g.name, "qkv", g.d, {g.q, g.kv, g.kv}, RowsEpilogue::store});
        s.push_back({g.name, "o+res", g.q, {g.d}, RowsEpilogue::add});
        s.push_back({g.name, "gate/up+swiglu", g.d, {g.inter, g.inter}, RowsEpilogue::swiglu});
        s.push_back({g.name, "down+res", g.inter, {g.d}, RowsEpilogue::add});
        s.push_back({g.name, "lm head f32", g.d, {g.vocab}, RowsEpilogue::store, true});
    }
    return s;
}

void run(Backend& be, const Shape& sh, int64_t rows) {
    RandomFill fill(be, 0.02f, 3);
    std::vector<DeviceTensor> w;
    int64_t cols = 0, bytes = 0;
    for (int64_t n : sh.n) {
        w.emplace_back(be, dflash::Shape{n, sh.k}, DType::bf16);
        fill(w.back().view());
        bytes += n * sh.k * 2;
        cols += n;
    }
    if (sh.ep != RowsEpilogue::store) cols = sh.n[0];
    DeviceTensor x(be, {rows, sh.k}, DType::bf16), res(be, {rows, cols}, DType::bf16);
    DeviceTensor y(be, {rows, cols}, sh.f32_out ? DType::f32 : DType::bf16);
    fill(x.view());
    fill(res.view());
    RowsLinear rl;
    for (size_t i = 0; i < w.size(); ++i) rl.w[i] = w[i];
    rl.epilogue = sh.ep;
    const Tensor r = sh.ep == RowsEpilogue::add ? res.view() : Tensor();
    constexpr int kCalls = 100;
    const double fused = median_seconds(be, 1, 7,
                                        [&] {
                                            for (int i = 0; i < kCalls; ++i)
                                                be.rows_linear(x, rl, r, y);
                                        }) /
                         kCalls;
    // The general path: one gemm a weight (beta 1 for the residual; SwiGLU's own kernel not
    // counted), into one output buffer per weight.
    std::vector<DeviceTensor> outs;
    for (int64_t n : sh.n) outs.emplace_back(be, dflash::Shape{rows, n}, y.dtype());
    const double general = median_seconds(be, 1, 7,
                                          [&] {
                                              for (int i = 0; i < kCalls; ++i)
                                                  for (size_t j = 0; j < w.size(); ++j)
                                                      be.gemm(x, false, w[j], true, outs[j]);
                                          }) /
                           kCalls;
    const double gbs = static_cast<double>(bytes) / fused / 1e9;
    std::fprintf(stderr,
                 "%-10s %-15s R=%-2lld %7.1f MB  rows_linear %7.2f us %6.0f GB/s %3.0f%%   gemm "
                 "%7.2f us  (%.2fx)\n",
                 sh.model.c_str(), sh.name.c_str(), static_cast<long long>(rows), bytes / 1e6,
                 fused * 1e6, gbs, 100 * gbs * 1e9 / kHbmBytesPerS, general * 1e6, general / fused);
    emit({{"bench", "rows_linear"},
          {"model", sh.model},
          {"product", sh.name},
          {"rows", rows},
          {"weight_bytes", bytes},
          {"rows_linear_us", fused * 1e6},
          {"gemm_us", general * 1e6},
          {"hbm_share", gbs * 1e9 / kHbmBytesPerS}});
}

}  // namespace
}  // namespace dflash::bench

int main() {
    using namespace dflash;
    if (cuda_device_count() == 0) {
        std::fprintf(stderr, "rows_linear_bench: no CUDA device; nothing measured\n");
        return 0;
    }
    try {
        // Launched serially: with programmatic dependent launch the back-to-back calls of one
        // product would overlap each other's tails, and a figure here is one product's own time
        // (docs/performance.md "Programmatic dependent launch for the decode block").
        GraphOptions serial;
        serial.programmatic_launch = false;
        auto be = make_backend(DeviceKind::cuda, 0, 1, serial);
        for (const auto& sh : bench::shapes())
            for (const int64_t rows : {1, 16}) bench::run(*be, sh, rows);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "rows_linear_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

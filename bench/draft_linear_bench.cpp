// A draft's products on the CPU (Note [bf16 drafting] in backend/cpu/bf16_linear.h): the linear
// layers of one draft of a 1-layer drafter (fc over the new context rows, their K/V, the block's
// q/k/v/o and MLP, the LM head on the block's rows), in fp32 through Backend::gemm and in bf16
// through the prepared copies, each pass after a 32 MB read that evicts the weights from L2 (as a
// verify does between drafts). Shapes: the demo's drafter (`demo`) and a Qwen3-0.6B-sized one
// (`d1024`). Usage: draft_linear_bench [--preset demo|d1024|all] [--passes N] [--threads N].
// A table on stderr, one JSON object per case on stdout. CPU only.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"

namespace dflash {
namespace {

struct Product {
    const char* name;
    int64_t m, n, k;
};

struct Preset {
    std::string name;
    std::vector<Product> products;
};

// hidden D, KV width, MLP width I, vocabulary V, 2 target layers in, block 8, ~5 new context rows.
std::vector<Product> draft_products(int64_t D, int64_t kv, int64_t I, int64_t V) {
    return {{"fc", 5, D, 2 * D}, {"ctx k", 5, kv, D}, {"ctx v", 5, kv, D}, {"q", 8, D, D},
            {"k", 8, kv, D},     {"v", 8, kv, D},     {"o", 8, D, D},      {"gate", 8, I, D},
            {"up", 8, I, D},     {"down", 8, D, I},   {"lm head", 7, V, D}};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

nlohmann::json run_case(Backend& be, const Preset& p, int passes) {
    Rng rng(1);
    std::vector<HostTensor> w, x, y;
    std::vector<std::unique_ptr<PreparedWeight>> copies;
    double weight_bytes = 0;
    for (const Product& q : p.products) {
        w.emplace_back(Shape{q.n, q.k});
        for (int64_t i = 0; i < w.back().numel(); ++i) w.back().f32()[i] = 0.02f * rng.normal();
        x.emplace_back(Shape{q.m, q.k});
        for (int64_t i = 0; i < x.back().numel(); ++i) x.back().f32()[i] = rng.normal();
        y.emplace_back(Shape{q.m, q.n});
        copies.push_back(be.prepare_bf16_weight(w.back().view()));
        weight_bytes += 4.0 * static_cast<double>(q.n * q.k);
    }
    const bool have_copies = copies.front() != nullptr;
    std::vector<float> evict(8 << 20, 1.0f);
    volatile float sink = 0;
    auto flush = [&] {
        float s = 0;
        for (size_t i = 0; i < evict.size(); i += 16) s += evict[i];
        sink = s;
    };
    double best_f32 = 1e30, best_bf16 = 1e30;
    for (int pass = 0; pass < passes; ++pass) {
        flush();
        auto t0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < p.products.size(); ++i)
            be.gemm(x[i].view(), false, w[i].view(), true, y[i].view());
        best_f32 = std::min(best_f32, seconds_since(t0));
        if (!have_copies) continue;
        flush();
        t0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < p.products.size(); ++i)
            be.linear(x[i].view(), w[i].view(), copies[i].get(), y[i].view());
        best_bf16 = std::min(best_bf16, seconds_since(t0));
    }
    (void)sink;
    const double us_f32 = best_f32 * 1e6, us_bf16 = have_copies ? best_bf16 * 1e6 : 0.0;
    char bf16_col[32] = "no bf16", ratio_col[32] = "-";
    if (have_copies) {
        std::snprintf(bf16_col, sizeof bf16_col, "%.1f", us_bf16);
        std::snprintf(ratio_col, sizeof ratio_col, "%.3f", us_bf16 / us_f32);
    }
    std::fprintf(stderr, "%-8s %9.1f MB %12.1f %12s %8s\n", p.name.c_str(), weight_bytes / 1e6,
                 us_f32, bf16_col, ratio_col);
    return {{"preset", p.name},
            {"f32_weight_bytes", weight_bytes},
            {"f32_us", us_f32},
            {"bf16_us", have_copies ? nlohmann::json(us_bf16) : nlohmann::json(nullptr)},
            {"passes", passes}};
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
    using namespace dflash;
    std::string preset = "all";
    int passes = 300, threads = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--preset")
            preset = argv[i + 1];
        else if (a == "--passes")
            passes = std::max(1, std::atoi(argv[i + 1]));
        else if (a == "--threads")
            threads = std::max(1, std::atoi(argv[i + 1]));
        else {
            std::fprintf(stderr, "unknown option %s\n", a.c_str());
            return 2;
        }
    }
    const std::vector<Preset> presets = {{"demo", draft_products(256, 128, 768, 264)},
                                         {"d1024", draft_products(1024, 1024, 3072, 151936)}};
    auto be = make_cpu_backend(threads);
    std::fprintf(stderr, "one draft's products, min of %d passes after an L2 flush, %d thread(s)\n",
                 passes, threads);
    std::fprintf(stderr, "%-8s %12s %12s %12s %8s\n", "preset", "f32 weights", "f32 us", "bf16 us",
                 "bf16/f32");
    bool ran = false;
    for (const Preset& p : presets) {
        if (preset != "all" && preset != p.name) continue;
        ran = true;
        std::printf(
            "%s\n",
            run_case(*be, p, p.name == "d1024" ? std::max(1, passes / 30) : passes).dump().c_str());
    }
    if (!ran) {
        std::fprintf(stderr, "unknown preset %s (demo, d1024, all)\n", preset.c_str());
        return 2;
    }
    return 0;
}

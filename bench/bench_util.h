// What the model-level benchmarks share: a backend from the command line, random device weights
// without drawing billions of host normals, the median of repeated timings, and the output format
// (a table for people on stderr, one JSON object per case on stdout).
// Used by bench/train_step_bench.cpp and bench/decode_bench.cpp.
#pragma once

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "model/hf_config.h"
#include "model/params.h"

namespace dflash::bench {

// The dense bf16 peak of an H100/H200 SXM (what MFU is quoted against) and the copy bandwidth
// measured on the H200 (docs/performance.md).
inline constexpr double kPeakTflops = 989.4;
inline constexpr double kHbmBytesPerS = 4.24e12;

// A Qwen3-shaped target config (rope theta 1e6, q/k norm) for random-weight benchmarks.
inline TargetConfig qwen3_shape(int64_t layers, int64_t hidden, int64_t heads, int64_t kv_heads,
                                int64_t head_dim, int64_t inter, int64_t vocab, bool tied) {
    TargetConfig c;
    c.model_type = "qwen3";
    c.hidden_size = hidden;
    c.intermediate_size = inter;
    c.num_hidden_layers = layers;
    c.num_attention_heads = heads;
    c.num_key_value_heads = kv_heads;
    c.head_dim = head_dim;
    c.vocab_size = vocab;
    c.max_position_embeddings = 40960;
    c.rms_norm_eps = 1e-6;
    c.rope.theta = 1e6;
    c.qk_norm = true;
    c.tie_word_embeddings = tied;
    return c;
}

// Random device contents without drawing billions of host normals: 2^21 N(0, std^2) values are
// uploaded once, then every 2^20-element chunk of a destination is copied from the pool at a
// random rotation on the device (no two nearby rows repeat).
class RandomFill {
  public:
    RandomFill(Backend& be, float std, uint64_t seed) : be_(be), rng_(seed) {
        HostTensor host({2 * kChunk});
        for (int64_t i = 0; i < 2 * kChunk; ++i) host.f32()[i] = rng_.normal() * std;
        pool_ = DeviceTensor(be, {2 * kChunk}, be.compute_dtype());
        from_host_f32(be, pool_, host.view());
    }
    void operator()(const Tensor& t) {
        const int64_t n = t.numel();
        const Tensor flat = t.reshape({n});
        for (int64_t off = 0; off < n; off += kChunk) {
            const int64_t len = std::min(kChunk, n - off);
            const auto rot = static_cast<int64_t>(rng_.below(static_cast<uint64_t>(kChunk)));
            be_.copy(flat.rows(off, off + len), pool_.view().rows(rot, rot + len));
        }
    }
    // Every parameter (masters included); norm weights 1, like trained ones.
    void operator()(ParamSet& ps) {
        for (const Param& p : ps.params()) {
            const Tensor dst = p.master.empty() ? p.value : p.master;
            const bool norm =
                p.name.size() >= 11 && p.name.compare(p.name.size() - 11, 11, "norm.weight") == 0;
            if (norm)
                be_.fill(dst, 1.0f);
            else
                (*this)(dst);
        }
        ps.sync_values_from_master();
    }

  private:
    static constexpr int64_t kChunk = int64_t{1} << 20;
    Backend& be_;
    Rng rng_;
    DeviceTensor pool_;
};

// Median seconds of `runs` calls of fn (each ends with be.synchronize()) after `warmup` calls.
inline double median_seconds(Backend& be, int warmup, int runs, const std::function<void()>& fn) {
    for (int i = 0; i < warmup; ++i) fn();
    be.synchronize();
    std::vector<double> t;
    for (int i = 0; i < runs; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        fn();
        be.synchronize();
        t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

inline void emit(const nlohmann::json& j) {
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
}

}  // namespace dflash::bench

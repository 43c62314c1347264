// The attention forward's block shapes (attn::FwdTile, backend/cuda/kernels/attention.h): the wide
// kernels (128 query rows a block: 4 warps of 32 rows, 8 warps of 16) against the 64-row kernel,
// which tests/cuda/attention_cuda_test.cpp checks against the CPU backend whatever the default
// shape is. Through the raw launcher, on awkward sizes of each mask the forward serves: causal
// (Sq not a multiple of 128, a query offset, GQA), a causal window with sinks, full, a prefill over
// a KV cache (kv_len on the device), and dflash blocks with padding, context starts and a drafter
// window, at head dims 64 and 128 (256 always runs the 64-row kernel), and scores that grow along
// the keys by hundreds of log2 units a tile (the wide kernels rescale lazily). Outputs start as
// NaN, so unwritten elements fail. Tolerances as attention_cuda_test's forward (both sides round P
// to bf16 for the tensor cores, differently): out relative L2 error <= 1e-2 and every element
// within 3e-2 (1 + |ref|); lse within 2e-3, -inf exactly where the 64-row kernel has -inf. The same
// shapes run on the CPU emulator: tests/ops/attention_emu_test.cpp.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/kernels/attention.h"
#include "core/dtype.h"
#include "core/rng.h"

namespace dflash {
namespace {

using cuda::attn::FwdArgs;
using cuda::attn::FwdTile;

void check(cudaError_t e) {
    ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
}

// Device copies of host vectors, freed at scope exit.
struct Dev {
    std::vector<void*> ptrs;
    ~Dev() {
        for (void* p : ptrs) (void)cudaFree(p);
    }
    template <class T>
    T* put(const std::vector<T>& h) {
        void* p = nullptr;
        check(cudaMalloc(&p, std::max<size_t>(h.size() * sizeof(T), 16)));
        ptrs.push_back(p);
        if (!h.empty())
            check(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
        return static_cast<T*>(p);
    }
};

template <class T>
std::vector<T> get(const T* p, size_t n) {
    std::vector<T> h(n);
    check(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}

struct Case {
    std::string name;
    int sq = 0, sk = 0, h = 4, hkv = 2, d = 128;
    int kind = cuda::attn::kCausal;
    int q_offset = 0, ctx = 0, block = 1, window = 0, kv_len = -1;
    std::vector<int32_t> anchors, starts;
    bool sinks = false;
    double k_growth = 0.0;  // key j's K row times 1 + k_growth * j (the lazy rescale must move)
};

struct Result {
    std::vector<uint16_t> out;
    std::vector<float> lse;
};

Result run(const Case& c, FwdTile tile) {
    Rng rng(7);
    auto random = [&](size_t n) {
        std::vector<uint16_t> x(n);
        for (auto& e : x) e = f32_to_bf16(rng.normal());
        return x;
    };
    Dev dev;
    FwdArgs a;
    a.q = dev.put(random(size_t(c.sq) * c.h * c.d));
    std::vector<uint16_t> k = random(size_t(c.sk) * c.hkv * c.d);
    for (size_t i = 0; c.k_growth != 0.0 && i < k.size(); ++i) {
        const double f = 1.0 + c.k_growth * double(i / (size_t(c.hkv) * c.d));
        k[i] = f32_to_bf16(float(bf16_to_f32(k[i]) * f));
    }
    a.k = dev.put(k);
    a.v = dev.put(random(size_t(c.sk) * c.hkv * c.d));
    a.out = dev.put(std::vector<uint16_t>(size_t(c.sq) * c.h * c.d, 0x7fc0));  // NaN
    a.lse = dev.put(std::vector<float>(size_t(c.h) * c.sq, NAN));
    a.h = c.h;
    a.hkv = c.hkv;
    a.d = c.d;
    a.tile = tile;
    a.mask.kind = c.kind;
    a.mask.sq = c.sq;
    a.mask.sk = c.sk;
    a.mask.q_offset = c.q_offset;
    a.mask.ctx_len = c.ctx;
    a.mask.block = c.block;
    a.mask.window = c.window;
    if (!c.anchors.empty()) a.mask.anchors = dev.put(c.anchors);
    if (!c.starts.empty()) a.mask.ctx_start = dev.put(c.starts);
    if (c.kv_len >= 0) a.mask.kv_len = dev.put(std::vector<int32_t>{c.kv_len});
    if (c.sinks) {
        std::vector<float> s(size_t(c.h));
        for (int i = 0; i < c.h; ++i) s[size_t(i)] = 1.5f - 0.75f * float(i);
        a.mask.sinks = dev.put(s);
    }
    if (c.kind == cuda::attn::kDflash) {
        cuda::attn::QTileKeys* table =
            dev.put(std::vector<cuda::attn::QTileKeys>(size_t(cuda::attn::num_query_tiles(c.sq))));
        cuda::attn::dflash_plan(a.mask, table, nullptr);
        a.mask.qtiles = table;
    }
    cuda::attn::fwd(a, nullptr);
    check(cudaDeviceSynchronize());
    return {get(a.out, size_t(c.sq) * c.h * c.d), get(a.lse, size_t(c.h) * c.sq)};
}

void expect_same_as_rows64(const Case& c) {
    SCOPED_TRACE(c.name);
    const Result ref = run(c, FwdTile::rows64);
    for (FwdTile tile : {FwdTile::rows128, FwdTile::rows128_8w}) {
        SCOPED_TRACE("tile " + std::to_string(static_cast<int>(tile)));
        const Result got = run(c, tile);
        double num = 0, den = 0;
        size_t bad = 0;
        for (size_t i = 0; i < ref.out.size(); ++i) {
            const double x = bf16_to_f32(got.out[i]), y = bf16_to_f32(ref.out[i]);
            if (!(std::fabs(x - y) <= 3e-2 * (1 + std::fabs(y)))) ++bad;
            num += (x - y) * (x - y);
            den += y * y;
        }
        EXPECT_EQ(bad, 0u) << "elements off (or NaN: unwritten)";
        EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), 1e-2);
        for (size_t i = 0; i < ref.lse.size(); ++i) {
            if (std::isinf(ref.lse[i])) {
                ASSERT_EQ(got.lse[i], ref.lse[i]) << "lse " << i;
            } else {
                ASSERT_NEAR(got.lse[i], ref.lse[i], 2e-3) << "lse " << i;
            }
        }
    }
}

TEST(AttentionFwdTilesCuda, WideBlocksMatchTheNarrowKernel) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (int d : {64, 128}) {
        Case c;
        c.d = d;
        c.name = "causal 300 d" + std::to_string(d);
        c.sq = c.sk = 300;
        expect_same_as_rows64(c);
        c.name = "causal 300 growing scores";
        c.k_growth = 0.5;
        expect_same_as_rows64(c);
        c.k_growth = 0.0;
        c.name = "causal 190 q_offset 77 g4";
        c.sq = 190;
        c.sk = 267;
        c.q_offset = 77;
        c.h = 8;
        expect_same_as_rows64(c);
        Case w;
        w.d = d;
        w.name = "causal 400 window 70 sinks";
        w.sq = w.sk = 400;
        w.window = 70;
        w.sinks = true;
        expect_same_as_rows64(w);
        Case f;
        f.d = d;
        f.name = "full 150x77";
        f.kind = cuda::attn::kFull;
        f.sq = 150;
        f.sk = 77;
        expect_same_as_rows64(f);
        Case p;
        p.d = d;
        p.name = "prefill 200 over kv_len 330 of 512";
        p.sq = 200;
        p.sk = 512;
        p.kv_len = 330;
        expect_same_as_rows64(p);
        Case b;
        b.d = d;
        b.name = "dflash b16 ctx 300 padding, starts, window";
        b.kind = cuda::attn::kDflash;
        b.ctx = 300;
        b.block = 16;
        b.anchors = {3, 40, 40, 100, 130, 200, 250, 299, 300, -1, 64, 128, 180, -1, 7};
        b.starts = {0, 0, 10, 64, 64, 64, 200, 100, 0, 0, 0, 5, 70, 0, 0};
        b.sq = int(b.anchors.size()) * b.block;
        b.sk = b.ctx + b.sq;
        expect_same_as_rows64(b);
        b.name = "dflash b16 ctx 300 drafter window 40";
        b.starts.clear();
        b.window = 40;
        expect_same_as_rows64(b);
    }
}

}  // namespace
}  // namespace dflash

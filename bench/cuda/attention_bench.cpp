// Attention benchmark on the GPU (cuda::attention_fwd / attention_bwd of
// backend/cuda/attention.cpp): causal fwd/bwd at S = 4096 (and 16384), H = 32, Hkv = 8, Dh = 128;
// the DFlash block mask with a 4096-row context and N = 512 blocks of B = 16; decoding over a KV
// cache with Sq = 1 and 16 at kv_len 4096 and 32768. Prints a table: median of 20 timed runs
// (cudaEvents, after warm-up), TFLOP/s against the bf16 GEMM ceiling (790) or GB/s of K/V read
// against the HBM copy ceiling (4.24 TB/s) of docs/performance.md. Skips with a message
// when there is no GPU. Correctness is tests/cuda/attention_cuda_test.cpp's job.
// Each training shape's forward runs through the op (the default block shape), then through the
// raw launcher once per block shape (attn::FwdTile: "fwd r64", "fwd r128" 4 warps x 32 rows,
// "fwd r128w8" 8 warps x 16 rows), so one run compares them, at head dim 64 too (causal S 4096,
// H 64, Hkv 8, forward only). --fwd-only skips the backward and the decode rows.
#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/tensor.h"

#if DFLASH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device.h"
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/op_workspace.h"

namespace dflash::cuda {
namespace {

constexpr double kGemmCeiling = 790.0;  // TFLOP/s, bf16 dense
constexpr double kHbmCeiling = 4240.0;  // GB/s, copy
constexpr int kRuns = 20;

// Device memory for the whole benchmark, freed at exit.
struct Arena {
    std::vector<void*> blocks;
    ~Arena() {
        for (void* p : blocks) (void)cudaFree(p);
    }
    Tensor tensor(Shape shape, DType dt) {
        void* p = nullptr;
        const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dt);
        DF_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 256)));
        blocks.push_back(p);
        return Tensor(p, dt, shape, DeviceRef{DeviceKind::cuda, 0});
    }
    // Random bf16 values (or the given i32 values) copied in.
    Tensor random_bf16(Shape shape, Rng& rng) {
        Tensor t = tensor(shape, DType::bf16);
        std::vector<uint16_t> h(static_cast<size_t>(shape.numel()));
        for (auto& x : h) x = f32_to_bf16(rng.normal());
        DF_CUDA_CHECK(cudaMemcpy(t.data(), h.data(), h.size() * 2, cudaMemcpyHostToDevice));
        return t;
    }
    Tensor i32(const std::vector<int32_t>& v) {
        Tensor t = tensor({static_cast<int64_t>(v.size())}, DType::i32);
        DF_CUDA_CHECK(cudaMemcpy(t.data(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
        return t;
    }
};

// Median milliseconds of kRuns runs of fn on the stream, after 3 warm-up runs.
template <class Fn>
double median_ms(const Exec& ex, Fn&& fn) {
    cudaStream_t s = ex.stream;
    for (int i = 0; i < 3; ++i) {
        OpWorkspace::Scope scope(*ex.scratch);
        fn();
    }
    cudaEvent_t a, b;
    DF_CUDA_CHECK(cudaEventCreate(&a));
    DF_CUDA_CHECK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int i = 0; i < kRuns; ++i) {
        OpWorkspace::Scope scope(*ex.scratch);
        DF_CUDA_CHECK(cudaEventRecord(a, s));
        fn();
        DF_CUDA_CHECK(cudaEventRecord(b, s));
        DF_CUDA_CHECK(cudaEventSynchronize(b));
        float t = 0;
        DF_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    DF_CUDA_CHECK(cudaEventDestroy(a));
    DF_CUDA_CHECK(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

void row_flops(const char* what, const char* shape, double ms, double flops) {
    const double tflops = flops / (ms * 1e-3) / 1e12;
    std::printf("%-16s %-44s %9.3f ms %8.1f TFLOP/s %6.1f%%\n", what, shape, ms, tflops,
                100.0 * tflops / kGemmCeiling);
}

void row_bytes(const char* what, const char* shape, double ms, double bytes) {
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("%-16s %-44s %9.3f ms %8.1f GB/s    %6.1f%%\n", what, shape, ms, gbs,
                100.0 * gbs / kHbmCeiling);
}

struct Qkv {
    Tensor q, k, v, out, lse, dout, dq, dk, dv;
};

Qkv make_qkv(Arena& mem, Rng& rng, int64_t sq, int64_t sk, int64_t h, int64_t hkv, int64_t d,
             bool bwd) {
    Qkv t;
    t.q = mem.random_bf16({sq, h, d}, rng);
    t.k = mem.random_bf16({sk, hkv, d}, rng);
    t.v = mem.random_bf16({sk, hkv, d}, rng);
    t.out = mem.tensor({sq, h, d}, DType::bf16);
    t.lse = mem.tensor({h, sq}, DType::f32);
    if (bwd) {
        t.dout = mem.random_bf16({sq, h, d}, rng);
        t.dq = mem.tensor({sq, h, d}, DType::bf16);
        t.dk = mem.tensor({sk, hkv, d}, DType::bf16);
        t.dv = mem.tensor({sk, hkv, d}, DType::bf16);
    }
    return t;
}

// The raw forward launcher's arguments for a causal or dflash_block mask (what
// backend/cuda/attention.cpp builds; the dflash plan table is made in the timed call, as the op
// makes it).
attn::FwdArgs raw_fwd_args(const Qkv& t, const AttnMask& mask, int64_t sq, int64_t sk) {
    attn::FwdArgs a;
    a.q = static_cast<const uint16_t*>(t.q.data());
    a.k = static_cast<const uint16_t*>(t.k.data());
    a.v = static_cast<const uint16_t*>(t.v.data());
    a.out = static_cast<uint16_t*>(t.out.data());
    a.lse = static_cast<float*>(t.lse.data());
    a.h = static_cast<int>(t.q.shape()[1]);
    a.hkv = static_cast<int>(t.k.shape()[1]);
    a.d = static_cast<int>(t.q.shape()[2]);
    a.mask.sq = static_cast<int>(sq);
    a.mask.sk = static_cast<int>(sk);
    if (mask.kind == AttnMaskKind::dflash_block) {
        a.mask.kind = attn::kDflash;
        a.mask.ctx_len = static_cast<int>(mask.ctx_len);
        a.mask.block = static_cast<int>(mask.block_size);
        a.mask.anchors = static_cast<const int32_t*>(mask.anchors.data());
    } else {
        a.mask.kind = attn::kCausal;
        a.mask.q_offset = static_cast<int>(mask.q_offset);
    }
    return a;
}

// Forward and backward of one training-shaped problem; `pairs` = visible (query, key) pairs.
// A training shape's heads and head dim: H 32, Hkv 8, Dh 128 unless given (the gpt-oss geometry,
// H 64, Hkv 8, Dh 64, times the forward's block shapes at head dim 64).
struct Heads {
    int64_t h = 32, hkv = 8, d = 128;
};

void bench_train(const Exec& ex, Arena& mem, Rng& rng, const char* what, int64_t sq, int64_t sk,
                 const AttnMask& mask, double pairs, bool fwd_only, Heads hd = {}) {
    const int64_t h = hd.h, hkv = hd.hkv, d = hd.d;
    Qkv t = make_qkv(mem, rng, sq, sk, h, hkv, d, true);
    char shape[96];
    std::snprintf(shape, sizeof(shape), "Sq=%lld Sk=%lld H=%lld Hkv=%lld Dh=%lld",
                  static_cast<long long>(sq), static_cast<long long>(sk), static_cast<long long>(h),
                  static_cast<long long>(hkv), static_cast<long long>(d));
    const double fwd_flops = 4.0 * d * h * pairs;
    const double f = median_ms(ex, [&] { attention_fwd(ex, t.q, t.k, t.v, mask, t.out, t.lse); });
    row_flops((std::string(what) + " fwd").c_str(), shape, f, fwd_flops);
    attn::FwdArgs raw = raw_fwd_args(t, mask, sq, sk);
    attn::QTileKeys* table = nullptr;
    if (raw.mask.kind == attn::kDflash) {
        const Tensor tt = mem.tensor(
            {static_cast<int64_t>(attn::num_query_tiles(raw.mask.sq) * sizeof(attn::QTileKeys))},
            DType::u8);
        table = static_cast<attn::QTileKeys*>(tt.data());
    }
    const std::pair<attn::FwdTile, const char*> tiles[] = {
        {attn::FwdTile::rows64, " fwd r64"},
        {attn::FwdTile::rows128, " fwd r128"},
        {attn::FwdTile::rows128_8w, " fwd r128w8"}};
    for (const auto& [tile, name] : tiles) {
        raw.tile = tile;
        const double r = median_ms(ex, [&] {
            if (table != nullptr) {
                attn::dflash_plan(raw.mask, table, ex.stream);
                raw.mask.qtiles = table;
            }
            attn::fwd(raw, ex.stream);
        });
        row_flops((std::string(what) + name).c_str(), shape, r, fwd_flops);
    }
    if (fwd_only) return;
    const double b = median_ms(ex, [&] {
        attention_bwd(ex, t.dout, t.q, t.k, t.v, t.out, t.lse, mask, t.dq, t.dk, t.dv);
    });
    row_flops((std::string(what) + " bwd").c_str(), shape, b, 2.5 * fwd_flops);
}

void bench_decode(const Exec& ex, Arena& mem, Rng& rng, int64_t sq, int64_t cap, int64_t kv) {
    const int64_t h = 32, hkv = 8, d = 128;
    Qkv t = make_qkv(mem, rng, sq, cap, h, hkv, d, false);
    const Tensor kv_len = mem.i32({static_cast<int32_t>(kv)});
    const AttnMask mask = AttnMask::over_cache(AttnMaskKind::causal, kv_len);
    char shape[96];
    std::snprintf(shape, sizeof(shape), "Sq=%lld kv_len=%lld cap=%lld H=32 Hkv=8 Dh=128",
                  static_cast<long long>(sq), static_cast<long long>(kv),
                  static_cast<long long>(cap));
    const double ms = median_ms(ex, [&] { attention_fwd(ex, t.q, t.k, t.v, mask, t.out, t.lse); });
    row_bytes("decode", shape, ms, 2.0 * kv * hkv * d * 2);
}

void run(bool fwd_only) {
    CudaDevice dev(0);
    CudaDevice::Guard hold(dev);
    cudaDeviceProp prop{};
    DF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    void* ws_mem = nullptr;
    const size_t ws_bytes = size_t{256} << 20;
    DF_CUDA_CHECK(cudaMalloc(&ws_mem, ws_bytes));
    OpWorkspace ws(ws_mem, ws_bytes);
    Exec ex;
    ex.stream = dev.stream();
    ex.scratch = &ws;
    ex.sm_count = prop.multiProcessorCount;
    ex.device = 0;
    std::printf(
        "attention on %s (%d SMs); ceilings (docs/performance.md): bf16 GEMM %.0f TFLOP/s, "
        "HBM copy %.0f GB/s\n",
        prop.name, prop.multiProcessorCount, kGemmCeiling, kHbmCeiling);
    std::printf(
        "FLOPs count unmasked work only: fwd = 4*Dh*H*P, bwd = 2.5*fwd (5 GEMMs; this "
        "backward runs 7: S and dP are recomputed by the dQ kernel), P = visible "
        "(query, key) pairs: causal S(S+1)/2, dflash sum over non-padding blocks of "
        "B*(anchor + B). Decode: GB/s of K/V read = 2*kv_len*Hkv*Dh*2 bytes / time.\n");
    Rng rng(1);
    {
        Arena mem;
        for (int64_t s : {4096, 16384}) {
            bench_train(ex, mem, rng, "causal", s, s, AttnMask::causal(), double(s) * (s + 1) / 2,
                        fwd_only);
        }
        const int64_t s = 4096;
        bench_train(ex, mem, rng, "causal d64", s, s, AttnMask::causal(), double(s) * (s + 1) / 2,
                    true, Heads{64, 8, 64});
    }
    {
        Arena mem;
        const int64_t ctx = 4096, n = 512, b = 16;
        std::vector<int32_t> anchors(n);
        for (auto& a : anchors) a = static_cast<int32_t>(1 + rng.below(ctx));
        std::sort(anchors.begin(), anchors.end());
        double pairs = 0;
        for (int32_t a : anchors) pairs += double(b) * (a + b);
        const Tensor ta = mem.i32(anchors);
        bench_train(ex, mem, rng, "dflash", n * b, ctx + n * b, AttnMask::dflash_block(ctx, b, ta),
                    pairs, fwd_only);
    }
    if (!fwd_only) {
        Arena mem;
        for (int64_t sq : {1, 16}) {
            bench_decode(ex, mem, rng, sq, 4096, 4096);
            bench_decode(ex, mem, rng, sq, 32768, 4096);
            bench_decode(ex, mem, rng, sq, 32768, 32768);
        }
    }
    DF_CUDA_CHECK(cudaFree(ws_mem));
}

}  // namespace
}  // namespace dflash::cuda

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    bool fwd_only = false;
    for (int i = 1; i < argc; ++i) {
        if (std::string(argv[i]) == "--fwd-only") {
            fwd_only = true;
        } else {
            std::printf("attention_bench: unknown argument %s (takes --fwd-only)\n", argv[i]);
            return 2;
        }
    }
    if (dflash::cuda::device_count() == 0) {
        std::printf("attention_bench: no CUDA device, skipped\n");
        return 0;
    }
    try {
        dflash::cuda::run(fwd_only);
    } catch (const std::exception& e) {
        std::printf("attention_bench: %s\n", e.what());
        return 1;
    }
    return 0;
}

#else
int main() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    std::printf("attention_bench: built without CUDA, skipped\n");
    return 0;
}
#endif

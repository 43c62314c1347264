// Mixture-of-experts benchmark on the GPU (cuda::moe_route / moe_experts of backend/cuda/moe.cpp)
// at the MoE blocks of Qwen3-30B-A3B (D 2048, I 768, 128 experts, top-8, SwiGLU) and gpt-oss-20b
// (D 2880, I 2880, 32 experts, top-4, clamped SwiGLU with biases): decode and verify (1, 4, 16
// tokens) and a 3072-token prefill, routed by moe_route on random logits. Prints a table: median
// of 20 timed runs (cudaEvents, after warm-up); for moe_experts the expert weights read (each
// expert some token picked, once) in GB/s against the HBM copy ceiling (4.24 TB/s) and the
// products' TFLOP/s against the bf16 GEMM ceiling (790) of docs/performance.md. Skips with a
// message when there is no GPU. Correctness is tests/cuda/moe_cuda_test.cpp's job.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/rng.h"
#include "core/tensor.h"

#if DFLASH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_workspace.h"

namespace dflash {
namespace {

constexpr double kGemmCeiling = 790.0;  // TFLOP/s, bf16 dense
constexpr double kHbmCeiling = 4240.0;  // GB/s, copy
constexpr int kWarmup = 3;
constexpr int kRuns = 20;

// Device memory owned by the bench (freed at scope exit).
class DevMem {
  public:
    explicit DevMem(size_t bytes) { DF_CUDA_CHECK(cudaMalloc(&p_, std::max<size_t>(bytes, 256))); }
    ~DevMem() { (void)cudaFree(p_); }
    DevMem(const DevMem&) = delete;
    DevMem& operator=(const DevMem&) = delete;
    void* get() const { return p_; }

  private:
    void* p_ = nullptr;
};

struct Ctx {
    cudaStream_t stream = nullptr;
    cuda::OpWorkspace* scratch = nullptr;
    cuda::Exec ex;
    std::vector<std::unique_ptr<DevMem>> mem;

    Tensor tensor(Shape shape, DType dt) {
        mem.push_back(
            std::make_unique<DevMem>(static_cast<size_t>(shape.numel()) * dtype_size(dt)));
        return Tensor(mem.back()->get(), dt, shape, DeviceRef{DeviceKind::cuda, 0});
    }
    // Small random values (bf16 or f32) uploaded from the host.
    Tensor random(Shape shape, DType dt, Rng& rng, float scale) {
        Tensor t = tensor(shape, dt);
        const auto n = static_cast<size_t>(shape.numel());
        if (dt == DType::f32) {
            std::vector<float> v(n);
            for (auto& x : v) x = scale * rng.normal();
            DF_CUDA_CHECK(cudaMemcpy(t.data(), v.data(), n * 4, cudaMemcpyHostToDevice));
        } else {
            std::vector<uint16_t> v(n);
            for (auto& x : v) x = f32_to_bf16(scale * rng.normal());
            DF_CUDA_CHECK(cudaMemcpy(t.data(), v.data(), n * 2, cudaMemcpyHostToDevice));
        }
        return t;
    }
};

double median_ms(Ctx& c, const std::function<void()>& fn) {
    cudaEvent_t a, b;
    DF_CUDA_CHECK(cudaEventCreate(&a));
    DF_CUDA_CHECK(cudaEventCreate(&b));
    auto once = [&] {
        const cuda::OpWorkspace::Scope scope(*c.scratch);
        fn();
    };
    for (int i = 0; i < kWarmup; ++i) once();
    std::vector<float> ms(kRuns);
    for (int i = 0; i < kRuns; ++i) {
        DF_CUDA_CHECK(cudaEventRecord(a, c.stream));
        once();
        DF_CUDA_CHECK(cudaEventRecord(b, c.stream));
        DF_CUDA_CHECK(cudaEventSynchronize(b));
        DF_CUDA_CHECK(cudaEventElapsedTime(&ms[i], a, b));
    }
    DF_CUDA_CHECK(cudaEventDestroy(a));
    DF_CUDA_CHECK(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[kRuns / 2];
}

struct Model {
    const char* name;
    int64_t D, I, E, k;
    MoeRouterKind router;
    MoeActivation act;
    bool biases;
};

void bench_model(Ctx& c, const Model& m) {
    Rng rng(7);
    MoeExperts w;
    w.gate_up = c.random({m.E, 2 * m.I, m.D}, DType::bf16, rng, 0.02f);
    w.down = c.random({m.E, m.D, m.I}, DType::bf16, rng, 0.02f);
    if (m.biases) {
        w.gate_up_bias = c.random({m.E, 2 * m.I}, DType::bf16, rng, 0.1f);
        w.down_bias = c.random({m.E, m.D}, DType::bf16, rng, 0.1f);
    }
    w.activation = m.act;
    const MoeRouting routing{m.router, m.k, true};
    for (const int64_t R : {int64_t{1}, int64_t{4}, int64_t{16}, int64_t{3072}}) {
        Tensor logits = c.random({R, m.E}, DType::f32, rng, 1.0f);
        Tensor x = c.random({R, m.D}, DType::bf16, rng, 1.0f);
        Tensor ids = c.tensor({R, m.k}, DType::i32), wts = c.tensor({R, m.k}, DType::f32);
        Tensor out = c.tensor({R, m.D}, DType::bf16);
        const double route_ms =
            median_ms(c, [&] { cuda::moe_route(c.ex, logits, routing, ids, wts); });
        std::vector<int32_t> host_ids(static_cast<size_t>(R * m.k));
        DF_CUDA_CHECK(
            cudaMemcpy(host_ids.data(), ids.data(), host_ids.size() * 4, cudaMemcpyDeviceToHost));
        const std::set<int32_t> used(host_ids.begin(), host_ids.end());
        const double ms = median_ms(c, [&] { cuda::moe_experts(c.ex, x, ids, wts, w, out); });
        const double bytes = static_cast<double>(used.size()) * 3.0 * m.D * m.I * 2.0;
        const double flops = 2.0 * 3.0 * static_cast<double>(R * m.k) * m.D * m.I;
        const double gbs = bytes / (ms * 1e-3) / 1e9, tflops = flops / (ms * 1e-3) / 1e12;
        std::printf("%-14s %6lld %9zu %10.4f %10.4f %9.1f %6.1f%% %8.1f %6.1f%%\n", m.name,
                    static_cast<long long>(R), used.size(), route_ms, ms, gbs,
                    100.0 * gbs / kHbmCeiling, tflops, 100.0 * tflops / kGemmCeiling);
    }
    DF_CUDA_CHECK(cudaStreamSynchronize(c.stream));
    c.mem.clear();
}

int run() {
    if (cuda_device_count() == 0) {
        std::printf("moe_bench: no CUDA device, skipped\n");
        return 0;
    }
    DF_CUDA_CHECK(cudaSetDevice(0));
    cudaDeviceProp prop{};
    DF_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    Ctx c;
    DF_CUDA_CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    const size_t ws_bytes = size_t{256} << 20;
    DevMem ws_mem(ws_bytes);
    cuda::OpWorkspace scratch(ws_mem.get(), ws_bytes);
    c.scratch = &scratch;
    c.ex.stream = c.stream;
    c.ex.scratch = &scratch;
    c.ex.sm_count = prop.multiProcessorCount;
    c.ex.device = 0;
    std::printf("%s, %d SMs; median of %d runs\n", prop.name, prop.multiProcessorCount, kRuns);
    std::printf("%-14s %6s %9s %10s %10s %9s %7s %8s %7s\n", "model", "tokens", "experts",
                "route ms", "experts ms", "GB/s", "% HBM", "TFLOP/s", "% GEMM");
    bench_model(c, {"qwen3-30b-a3b", 2048, 768, 128, 8, MoeRouterKind::softmax_topk,
                    MoeActivation::swiglu, false});
    bench_model(c, {"gpt-oss-20b", 2880, 2880, 32, 4, MoeRouterKind::topk_softmax,
                    MoeActivation::clamped_swiglu, true});
    DF_CUDA_CHECK(cudaStreamDestroy(c.stream));
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

#else

int main() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    std::printf("moe_bench: built without CUDA, skipped\n");
    return 0;
}

#endif

// Memory-bound CUDA ops at training shapes: RMSNorm fwd/bwd at [16384, 4096] and the per-head q
// norm [16384 * 32, 128], RoPE at [16384, 32, 128], SwiGLU fwd/bwd at [16384, 12288], residual and
// gradient adds, f32 -> bf16 copy, embedding fwd/bwd at S = 16K, D = 4096 (vocab 151,936), and
// AdamW + sum_squares over 1e9 parameters. Prints time (median of 25 runs timed with cudaEvents
// after warm-up), the bytes each op must move, GB/s and the share of the 4.24 TB/s HBM copy
// ceiling (docs/performance.md). The ops run through the Tensor-level cuda:: functions on a
// stream of the bench's own (so events can bracket them). Usage: elementwise_bench [--no-adamw].
// Skips with a message when no GPU is present.
#include <cstdio>
#include <cstring>

#if DFLASH_HAVE_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_workspace.h"
#include "core/rng.h"

namespace dflash {
namespace {

constexpr double kHbmGBs = 4240.0;
constexpr int kWarmup = 3;
constexpr int kRuns = 25;

// Device memory owned by the bench (freed at exit).
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

    Tensor tensor(Shape shape, DType dt, float value) {
        mem.push_back(
            std::make_unique<DevMem>(static_cast<size_t>(shape.numel()) * dtype_size(dt)));
        Tensor t(mem.back()->get(), dt, shape, DeviceRef{DeviceKind::cuda, 0});
        cuda::fill(ex, t, value);
        return t;
    }
    Tensor ints(const std::vector<int32_t>& v) {
        mem.push_back(std::make_unique<DevMem>(v.size() * 4));
        DF_CUDA_CHECK(
            cudaMemcpy(mem.back()->get(), v.data(), v.size() * 4, cudaMemcpyHostToDevice));
        return Tensor(mem.back()->get(), DType::i32, {static_cast<int64_t>(v.size())},
                      DeviceRef{DeviceKind::cuda, 0});
    }
    void free_all() {
        DF_CUDA_CHECK(cudaStreamSynchronize(stream));
        mem.clear();
    }
};

// Median milliseconds of fn over kRuns event-timed runs after kWarmup untimed ones.
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

void row(Ctx& c, const std::string& name, const std::string& shape, double bytes,
         const std::function<void()>& fn) {
    const double ms = median_ms(c, fn);
    const double gbs = bytes / (ms * 1e-3) / 1e9;
    std::printf("%-28s %-22s %10.3f %10.1f %9.1f %6.1f%%\n", name.c_str(), shape.c_str(), ms,
                bytes / 1e6, gbs, 100.0 * gbs / kHbmGBs);
    std::fflush(stdout);
}

void norms_rope_swiglu(Ctx& c) {
    const auto& ex = c.ex;
    {
        const int64_t r = 16384, d = 4096;
        Tensor x = c.tensor({r, d}, DType::bf16, 0.5f), w = c.tensor({d}, DType::bf16, 1.0f);
        Tensor y = c.tensor({r, d}, DType::bf16, 0.0f), rstd = c.tensor({r}, DType::f32, 0.0f);
        Tensor dy = c.tensor({r, d}, DType::bf16, 0.1f), dx = c.tensor({r, d}, DType::bf16, 0.0f);
        Tensor dw = c.tensor({d}, DType::f32, 0.0f);
        const double n = static_cast<double>(r * d);
        row(c, "rmsnorm_fwd", "[16384, 4096]", n * 4 + r * 4.0,
            [&] { cuda::rmsnorm_fwd(ex, x, w, 1e-6f, y, rstd); });
        row(c, "rmsnorm_bwd", "[16384, 4096]", n * 6 + r * 4.0,
            [&] { cuda::rmsnorm_bwd(ex, dy, x, w, rstd, dx, dw); });
        c.free_all();
    }
    {
        const int64_t s = 16384, h = 32, dh = 128;
        Tensor q = c.tensor({s, h, dh}, DType::bf16, 0.5f), w = c.tensor({dh}, DType::bf16, 1.0f);
        Tensor y = c.tensor({s, h, dh}, DType::bf16, 0.0f),
               rstd = c.tensor({s * h}, DType::f32, 0.0f);
        Tensor dx = c.tensor({s, h, dh}, DType::bf16, 0.0f), dw = c.tensor({dh}, DType::f32, 0.0f);
        std::vector<int32_t> pos(s);
        for (int64_t i = 0; i < s; ++i) pos[i] = static_cast<int32_t>(i);
        Tensor positions = c.ints(pos);
        Tensor inv_freq = c.tensor({dh / 2}, DType::f32, 1e-3f);
        const double n = static_cast<double>(s * h * dh);
        row(c, "q-norm fwd (per head)", "[16384*32, 128]", n * 4 + s * h * 4.0,
            [&] { cuda::rmsnorm_fwd(ex, q, w, 1e-6f, y, rstd); });
        row(c, "q-norm bwd (per head)", "[16384*32, 128]", n * 6 + s * h * 4.0,
            [&] { cuda::rmsnorm_bwd(ex, y, q, w, rstd, dx, dw); });
        row(c, "rope_fwd", "[16384, 32, 128]", n * 4,
            [&] { cuda::rope_fwd(ex, q, positions, inv_freq); });
        row(c, "rope_bwd", "[16384, 32, 128]", n * 4,
            [&] { cuda::rope_bwd(ex, q, positions, inv_freq); });
        c.free_all();
    }
    {
        const int64_t r = 16384, i = 12288;
        Tensor g = c.tensor({r, i}, DType::bf16, 0.5f), u = c.tensor({r, i}, DType::bf16, 1.5f);
        Tensor o = c.tensor({r, i}, DType::bf16, 0.0f), dg = c.tensor({r, i}, DType::bf16, 0.0f);
        Tensor du = c.tensor({r, i}, DType::bf16, 0.0f);
        const double n = static_cast<double>(r * i);
        row(c, "swiglu_fwd", "[16384, 12288]", n * 6, [&] { cuda::swiglu_fwd(ex, g, u, o); });
        row(c, "swiglu_bwd", "[16384, 12288]", n * 10,
            [&] { cuda::swiglu_bwd(ex, o, g, u, dg, du); });
        c.free_all();
    }
}

void adds_and_embedding(Ctx& c) {
    const auto& ex = c.ex;
    {
        const int64_t r = 16384, d = 4096;
        Tensor a = c.tensor({r, d}, DType::bf16, 0.5f), b = c.tensor({r, d}, DType::bf16, 0.25f);
        Tensor f = c.tensor({r, d}, DType::f32, 0.0f);
        const double n = static_cast<double>(r * d);
        row(c, "add_inplace bf16 += bf16", "[16384, 4096]", n * 6,
            [&] { cuda::add_inplace(ex, a, b, 1.0f); });
        row(c, "add_inplace f32 += bf16", "[16384, 4096]", n * 10,
            [&] { cuda::add_inplace(ex, f, b, 0.5f); });
        row(c, "copy f32 -> bf16", "[16384, 4096]", n * 6, [&] { cuda::copy(ex, a, f); });
        c.free_all();
    }
    {
        const int64_t s = 16384, v = 151936, d = 4096;
        Rng rng(1);
        std::vector<int32_t> ids(s);
        std::set<int32_t> unique;
        for (auto& id : ids) {
            id = static_cast<int32_t>(rng.below(v));
            unique.insert(id);
        }
        Tensor g_ids = c.ints(ids);
        Tensor table = c.tensor({v, d}, DType::bf16, 0.5f),
               out = c.tensor({s, d}, DType::bf16, 0.0f);
        Tensor dtable = c.tensor({v, d}, DType::f32, 0.0f);
        const double rows = static_cast<double>(s * d);
        row(c, "embedding_fwd", "S 16384, D 4096", rows * 4,
            [&] { cuda::embedding_fwd(ex, table, g_ids, out); });
        row(c, "embedding_bwd (random ids)", "S 16384, D 4096",
            rows * 2 + static_cast<double>(unique.size()) * d * 8,
            [&] { cuda::embedding_bwd(ex, g_ids, out, dtable); });
        std::vector<int32_t> few(s);
        for (int64_t i = 0; i < s; ++i) few[i] = static_cast<int32_t>(i % 64);
        Tensor g_few = c.ints(few);
        row(c, "embedding_bwd (64 ids)", "S 16384, D 4096", rows * 2 + 64.0 * d * 8,
            [&] { cuda::embedding_bwd(ex, g_few, out, dtable); });
        c.free_all();
    }
}

void optimizer(Ctx& c) {
    const auto& ex = c.ex;
    const int64_t n = 1000000000;
    Tensor master = c.tensor({n}, DType::f32, 0.5f), grad = c.tensor({n}, DType::f32, 0.01f);
    Tensor m = c.tensor({n}, DType::f32, 0.0f), v = c.tensor({n}, DType::f32, 0.0f);
    Tensor value = c.tensor({n}, DType::bf16, 0.0f);
    Tensor gs = c.tensor({1}, DType::f32, 0.5f), norm = c.tensor({1}, DType::f32, 0.0f);
    AdamWParams p;
    p.weight_decay = 0.1f;
    const double nd = static_cast<double>(n);
    row(c, "adamw_step + bf16 value", "1e9 params", nd * 30,
        [&] { cuda::adamw_step(ex, master, grad, m, v, p, gs, value); });
    row(c, "adamw_step", "1e9 params", nd * 28,
        [&] { cuda::adamw_step(ex, master, grad, m, v, p, Tensor(), Tensor()); });
    row(c, "sum_squares", "1e9 params", nd * 4, [&] { cuda::sum_squares(ex, grad, norm); });
    c.free_all();
}

int run(bool adamw) {
    if (cuda_device_count() == 0) {
        std::printf("elementwise_bench: no CUDA device, skipped\n");
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
    std::printf("%s, %d SMs; median of %d runs; ceiling %.0f GB/s (HBM copy)\n", prop.name,
                prop.multiProcessorCount, kRuns, kHbmGBs);
    std::printf("%-28s %-22s %10s %10s %9s %7s\n", "op", "shape", "ms", "MB moved", "GB/s",
                "% HBM");
    norms_rope_swiglu(c);
    adds_and_embedding(c);
    if (adamw) optimizer(c);
    DF_CUDA_CHECK(cudaStreamDestroy(c.stream));
    return 0;
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    const bool adamw = !(argc > 1 && std::strcmp(argv[1], "--no-adamw") == 0);
    try {
        return dflash::run(adamw);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "elementwise_bench: %s\n", e.what());
        return 1;
    }
}

#else

int main() {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    std::printf("elementwise_bench: built without CUDA, skipped\n");
    return 0;
}

#endif

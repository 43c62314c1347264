// Throughput of cuda::lm_head_ce (chunked LM head + cross-entropy) at R = 8192 rows, D = 4096,
// V = 151,936 (Qwen3 vocabulary), chunk 8192, in four modes: loss only (1 GEMM-equivalent
// R·V·D·2), + dh (the drafter: 2, see Note [Flash-style dh] in src/backend/cuda/lm_head_ce.cpp),
// + dh + dw (pretraining: 4 executed, 3 useful: logits, dh, dw), + dw only (3). For each: median of
// 20 runs timed with cudaEvents after warm-up, TFLOP/s counting the executed GEMM-equivalents,
// the useful ones (forward + each gradient asked), and 4 equivalents whenever dh is asked (the
// recompute design's count), all against the ~790 TFLOP/s bf16 ceiling; then the same GEMM
// sequence alone, to show what the row kernels cost. Usage: lm_head_ce_bench [R D V chunk].
// Skips with a message when no GPU is present.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/kernels/row_stats.h"
#include "backend/cuda/op_workspace.h"

namespace dflash {
namespace {

constexpr double kCeilingTflops = 790.0;
constexpr int kWarmup = 2;
constexpr int kRuns = 20;

double median_ms(cudaStream_t stream, const std::function<void()>& fn) {
    for (int i = 0; i < kWarmup; ++i) fn();
    std::vector<cudaEvent_t> ev(kRuns + 1);
    for (auto& e : ev) DF_CUDA_CHECK(cudaEventCreate(&e));
    DF_CUDA_CHECK(cudaEventRecord(ev[0], stream));
    for (int i = 0; i < kRuns; ++i) {
        fn();
        DF_CUDA_CHECK(cudaEventRecord(ev[i + 1], stream));
    }
    DF_CUDA_CHECK(cudaStreamSynchronize(stream));
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

// Device memory freed at scope exit.
struct DevMem {
    void* p = nullptr;
    explicit DevMem(size_t bytes) { DF_CUDA_CHECK(cudaMalloc(&p, bytes)); }
    ~DevMem() { (void)cudaFree(p); }
    DevMem(const DevMem&) = delete;
    DevMem& operator=(const DevMem&) = delete;
};

void upload_random_bf16(void* dst, size_t n, float scale, uint64_t seed) {
    std::vector<uint16_t> host(n);
    uint64_t s = seed;
    for (auto& x : host) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        const float u = static_cast<float>((s >> 40) & 0xffffff) / 16777216.0f;
        x = f32_to_bf16(scale * (2.0f * u - 1.0f));
    }
    DF_CUDA_CHECK(cudaMemcpy(dst, host.data(), n * 2, cudaMemcpyHostToDevice));
}

struct Mode {
    const char* name;
    bool dh, dw;
    int executed;  // GEMM-equivalents the op runs
    int useful;    // forward + each gradient asked
};

// The op's GEMM sequence for mode m (see Note [Flash-style dh] in lm_head_ce.cpp) without its
// row kernels, on the same buffers: what the GEMMs alone cost.
void gemm_sequence(const cuda::Exec& ex, const Tensor& h, const Tensor& w, const Tensor& dw,
                   const Tensor& ws, void* acc_mem, int64_t chunk, const Mode& m) {
    const int64_t r = h.dim(0), d = h.dim(1), v = w.dim(0);
    const int64_t s = cuda::lm_step(v, chunk), chunks = cuda::lm_chunk_count(v, s);
    const cuda::LmHeadCeLayout lay = cuda::lm_head_ce_layout(r, v, chunk);
    const DeviceRef dev = h.device();
    const Tensor acc(acc_mem, DType::f32, {r, d}, dev);
    for (int pass = 0; pass < (m.dw ? 2 : 1); ++pass) {
        for (int64_t c = 0; c < chunks; ++c) {
            const int64_t v0 = cuda::lm_chunk_begin(c, s), n = cuda::lm_chunk_size(c, v, s);
            const Tensor wc = w.rows(v0, v0 + n);
            const Tensor logits(ws.f32() + lay.logits, DType::f32, {r, n}, dev);
            const Tensor p(ws.f32() + lay.probs, DType::bf16, {r, n}, dev);
            cuda::gemm(ex, h, false, wc, true, logits, 1.0f, 0.0f);
            if (pass == 0 && m.dh)
                cuda::gemm(ex, p, false, wc, false, acc, 1.0f, c == 0 ? 0.0f : 1.0f);
            if (pass == 1) cuda::gemm(ex, p, true, h, false, dw.rows(v0, v0 + n), 1.0f, 1.0f);
        }
    }
}

void print_mode(const Mode& m, double ms, double gemm_ms, double equiv) {
    const auto rate = [&](int count, double t) { return count * equiv / (t * 1e-3) / 1e12; };
    std::printf("  %-22s %7.2f ms %7.1f (%4.1f%%) %7.1f (%4.1f%%) ", m.name, ms,
                rate(m.executed, ms), 100 * rate(m.executed, ms) / kCeilingTflops,
                rate(m.useful, ms), 100 * rate(m.useful, ms) / kCeilingTflops);
    if (m.dh) {
        std::printf("%7.1f (%4.1f%%) ", rate(4, ms), 100 * rate(4, ms) / kCeilingTflops);
    } else {
        std::printf("%14s ", "-");
    }
    std::printf("%7.2f ms (%.1f TFLOP/s)\n", gemm_ms, rate(m.executed, gemm_ms));
}

int run(int64_t r, int64_t d, int64_t v, int64_t chunk) {
    DF_CUDA_CHECK(cudaSetDevice(0));
    cudaStream_t stream = nullptr;
    DF_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const DeviceRef dev{DeviceKind::cuda, 0};
    cuda::GemmEngine engine;
    const size_t scratch_bytes = static_cast<size_t>(r * d) * 4 + (size_t{64} << 20);
    DevMem scratch_mem(scratch_bytes);
    cuda::OpWorkspace scratch(scratch_mem.p, scratch_bytes);
    cuda::Exec ex;
    ex.stream = stream;
    ex.gemm = &engine;
    ex.scratch = &scratch;

    DevMem h_mem(static_cast<size_t>(r * d) * 2), w_mem(static_cast<size_t>(v * d) * 2);
    upload_random_bf16(h_mem.p, static_cast<size_t>(r * d), 1.0f, 1);
    upload_random_bf16(w_mem.p, static_cast<size_t>(v * d), 0.05f, 2);
    std::vector<int32_t> labels_h(r);
    std::vector<float> weights_h(r);
    for (int64_t i = 0; i < r; ++i) {
        labels_h[i] = static_cast<int32_t>((i * 7919) % v);
        weights_h[i] = i % 10 == 9 ? 0.0f : 1.0f;
    }
    DevMem labels_mem(r * 4), weights_mem(r * 4), loss_mem(r * 4), argmax_mem(r * 4);
    DF_CUDA_CHECK(cudaMemcpy(labels_mem.p, labels_h.data(), r * 4, cudaMemcpyHostToDevice));
    DF_CUDA_CHECK(cudaMemcpy(weights_mem.p, weights_h.data(), r * 4, cudaMemcpyHostToDevice));
    DevMem dh_mem(static_cast<size_t>(r * d) * 2), dw_mem(static_cast<size_t>(v * d) * 4);
    DF_CUDA_CHECK(cudaMemset(dw_mem.p, 0, static_cast<size_t>(v * d) * 4));
    const int64_t ws_n = cuda::lm_head_ce_workspace(r, d, v, chunk);
    DevMem ws_mem(static_cast<size_t>(ws_n) * 4);

    const Tensor h(h_mem.p, DType::bf16, {r, d}, dev), w(w_mem.p, DType::bf16, {v, d}, dev);
    const Tensor labels(labels_mem.p, DType::i32, {r}, dev);
    const Tensor weights(weights_mem.p, DType::f32, {r}, dev);
    LmHeadCeOut base;
    base.loss_rows = Tensor(loss_mem.p, DType::f32, {r}, dev);
    base.argmax = Tensor(argmax_mem.p, DType::i32, {r}, dev);
    base.workspace = Tensor(ws_mem.p, DType::f32, {ws_n}, dev);
    const Tensor dh(dh_mem.p, DType::bf16, {r, d}, dev), dw(dw_mem.p, DType::f32, {v, d}, dev);

    const double equiv = 2.0 * static_cast<double>(r) * static_cast<double>(v) * d;
    std::printf(
        "lm_head_ce_bench: R=%lld D=%lld V=%lld chunk=%lld; one GEMM-equivalent "
        "R*V*D*2 = %.2f TFLOP; median of %d runs; ceiling %.0f TFLOP/s\n\n",
        static_cast<long long>(r), static_cast<long long>(d), static_cast<long long>(v),
        static_cast<long long>(chunk), equiv / 1e12, kRuns, kCeilingTflops);
    std::printf("  %-22s %10s %14s %14s %14s %12s\n", "mode", "median", "executed", "useful",
                "4-count", "GEMMs alone");
    const Mode modes[] = {{"loss + argmax", false, false, 1, 1},
                          {"+ dh (drafter)", true, false, 2, 2},
                          {"+ dh + dw (pretrain)", true, true, 4, 3},
                          {"+ dw only", false, true, 3, 2}};
    for (const Mode& m : modes) {
        LmHeadCeOut out = base;
        if (m.dh) out.dh = dh;
        if (m.dw) out.dw = dw;
        const double ms = median_ms(stream, [&] {
            const cuda::OpWorkspace::Scope scope(scratch);
            cuda::lm_head_ce(ex, h, w, labels, weights, 1.0f / static_cast<float>(r), chunk, out);
        });
        const double gemm_ms = median_ms(
            stream, [&] { gemm_sequence(ex, h, w, dw, base.workspace, scratch_mem.p, chunk, m); });
        print_mode(m, ms, gemm_ms, equiv);
    }
    std::printf(
        "\n  executed / useful / 4-count: TFLOP/s counting that many R*V*D*2 GEMMs "
        "(useful = forward + dh + dw as asked; 4-count = the recompute design's count "
        "whenever dh is asked)\n");
    DF_CUDA_CHECK(cudaStreamDestroy(stream));
    return 0;
}

}  // namespace
}  // namespace dflash

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // every line reaches the log, even on a crash
    if (dflash::cuda_device_count() == 0) {
        std::printf("lm_head_ce_bench: no CUDA device, skipping\n");
        return 0;
    }
    const int64_t r = argc > 1 ? std::atoll(argv[1]) : 8192;
    const int64_t d = argc > 2 ? std::atoll(argv[2]) : 4096;
    const int64_t v = argc > 3 ? std::atoll(argv[3]) : 151936;
    const int64_t chunk = argc > 4 ? std::atoll(argv[4]) : 8192;
    try {
        return dflash::run(r, d, v, chunk);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "lm_head_ce_bench: %s\n", e.what());
        return 1;
    }
}

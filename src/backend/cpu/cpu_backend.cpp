// CpuBackend: the Backend interface over the cpu:: reference ops. The CPU "device" is host memory,
// so allocation is aligned host memory, transfers are copies and everything runs immediately, on
// the backend's own thread pool (Note [CPU threads] in cpu/thread_pool.h).
// Tested by tests/ops/*_test.cpp, tests/model/*_test.cpp and tests/infer/*_test.cpp.
#include <cstdlib>
#include <cstring>

#include "backend/backend.h"
#include "backend/cpu/bf16_linear.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/f32_panels.h"
#include "backend/cpu/host_collectives.h"

namespace dflash {
namespace {

// The CPU's PreparedWeight: the weight in bf16 tiles for cpu::linear_bf16.
struct CpuBf16Weight final : PreparedWeight {
    cpu::Bf16Weight packed;
};

// The CPU's other PreparedWeight: the weight in fp32 panels for cpu::linear_f32_panels.
struct CpuF32Weight final : PreparedWeight {
    cpu::F32Panels panels;
};

class CpuBackend final : public Backend {
  public:
    CpuBackend(int threads, HostMemorySource memory)
        : memory_(std::move(memory)), pool_(threads < 1 ? 1 : threads), ex_{&pool_} {}
    std::string name() const override { return "cpu"; }
    std::unique_ptr<DeviceCollectives> make_device_collectives(Communicator& host,
                                                               const CollectiveOptions&) override {
        return cpu::make_host_collectives(host);
    }
    DeviceRef device() const override { return {}; }
    DType compute_dtype() const override { return DType::f32; }

    Buffer allocate(size_t bytes) override {
        // 256 bytes, like cudaMalloc: workspace slices keep the alignment the CUDA kernels need.
        const size_t rounded = std::max<size_t>(256, (bytes + 255) / 256 * 256);
        if (memory_) return allocate_from_source(bytes, rounded);
        void* p = std::aligned_alloc(256, rounded);
        DF_CHECK(p != nullptr, "out of host memory allocating {} bytes", rounded);
        std::memset(p, 0, rounded);
        mem_->add(bytes);
        return Buffer(p, bytes, DeviceRef{}, [mem = mem_, bytes](void* q) {
            std::free(q);
            mem->sub(bytes);
        });
    }
    Buffer allocate_host(size_t bytes) override { return allocate(bytes); }
    MemoryCounters memory_counters() const override { return mem_->read(); }
    void reset_peak_memory() override { mem_->reset_peak(); }

    void upload(const Tensor& dst, const Tensor& src) override {
        check_transfer(dst, src, "upload");
        if (dst.data() != src.data()) std::memcpy(dst.data(), src.data(), src.nbytes());
    }
    void download(const Tensor& dst, const Tensor& src) override {
        check_transfer(dst, src, "download");
        if (dst.data() != src.data()) std::memcpy(dst.data(), src.data(), src.nbytes());
    }
    void synchronize() override {}

    // Every op of backend/op_list.h runs the cpu:: reference of the same name on this
    // backend's threads.
#define DFLASH_OP(name, params, args)        \
    void name params override {              \
        cpu::name(ex_, DFLASH_UNPAREN args); \
    }
#include "backend/op_list.h"

    std::unique_ptr<PreparedWeight> prepare_bf16_weight(const Tensor& w) override {
        // The portable bf16 kernel is slower than gemm's fp32 ones: no copy without AVX-512.
        if (cpu::best_bf16_kernel() == cpu::Bf16Kernel::portable) return nullptr;
        cpu::check_cpu_f32(w, "prepare_bf16_weight", "W");
        DF_CHECK(w.rank() == 2, "prepare_bf16_weight: W has shape {}; expected [N, K]",
                 w.shape().to_string());
        auto p = std::make_unique<CpuBf16Weight>();
        p->packed = cpu::pack_bf16_weight(ex_, w.f32(), w.dim(0), w.dim(1));
        return p;
    }
    std::unique_ptr<PreparedWeight> prepare_f32_weight(const Tensor& w) override {
        if (!cpu::f32_panels_supported(cpu::detected_isa())) return nullptr;
        cpu::check_cpu_f32(w, "prepare_f32_weight", "W");
        DF_CHECK(w.rank() == 2, "prepare_f32_weight: W has shape {}; expected [N, K]",
                 w.shape().to_string());
        auto p = std::make_unique<CpuF32Weight>();
        p->panels = cpu::pack_f32_panels(ex_, cpu::detected_isa(), w.f32(), w.dim(0), w.dim(1));
        return p;
    }
    void linear(const Tensor& x, const Tensor& w, const PreparedWeight* prepared, const Tensor& y,
                float beta) override {
        if (prepared == nullptr) return cpu::gemm(ex_, x, false, w, true, y, 1.0f, beta);
        if (const auto* f = dynamic_cast<const CpuF32Weight*>(prepared)) {
            const cpu::F32Panels& pw = f->panels;
            DF_CHECK(pw.source == w.f32() && pw.n == w.dim(0) && pw.k == w.dim(-1),
                     "linear: the prepared weight was made from another tensor than {}",
                     w.describe());
            const int64_t m = check_linear(x, y, pw.n, pw.k);
            return cpu::linear_f32_panels(ex_, m, x.f32(), pw.k, pw, beta, y.f32(), pw.n);
        }
        const auto* p = dynamic_cast<const CpuBf16Weight*>(prepared);
        DF_CHECK(p != nullptr, "linear: the prepared weight is not the CPU backend's");
        DF_CHECK(p->packed.source == w.f32() && p->packed.n == w.dim(0) && p->packed.k == w.dim(-1),
                 "linear: the prepared weight was made from another tensor than {}", w.describe());
        const int64_t m = check_linear(x, y, p->packed.n, p->packed.k);
        cpu::linear_bf16(ex_, m, x.f32(), p->packed.k, p->packed, beta, y.f32(), p->packed.n);
    }
    int64_t lm_head_ce_workspace(int64_t rows, int64_t, int64_t vocab,
                                 int64_t chunk) const override {
        return rows * std::min(chunk, vocab);
    }
    int64_t lm_head_kl_workspace(int64_t rows, int64_t, int64_t vocab,
                                 int64_t chunk) const override {
        return cpu::lm_head_kl_workspace(rows, vocab, chunk);
    }

  private:
    // x [.., k] and y [.., n] of a product with a prepared W [n, k]; returns x's rows.
    static int64_t check_linear(const Tensor& x, const Tensor& y, int64_t n, int64_t k) {
        cpu::check_cpu_f32(x, "linear", "x");
        cpu::check_cpu_f32(y, "linear", "y");
        const int64_t xk = x.dim(-1), m = xk == 0 ? 0 : x.numel() / xk;
        DF_CHECK(xk == k && y.dim(-1) == n && y.numel() == m * n,
                 "linear: x {} · Wᵀ (W [{}, {}]) into y {}", x.shape().to_string(), n, k,
                 y.shape().to_string());
        return m;
    }
    static void check_transfer(const Tensor& dst, const Tensor& src, const char* op) {
        DF_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(),
                 "{}: dst {} and src {} must have the same dtype and element count", op,
                 dst.describe(), src.describe());
    }

    // The same contract from memory_: zero-filled, counted; the source's buffer is released when
    // the returned one is.
    Buffer allocate_from_source(size_t bytes, size_t rounded) {
        auto held = std::make_shared<Buffer>(memory_(rounded));
        DF_CHECK(held->bytes() >= rounded && held->data() != nullptr,
                 "the host memory source gave {} bytes for {}", held->bytes(), rounded);
        DF_CHECK(held->device().kind == DeviceKind::cpu, "the host memory source gave {} memory",
                 to_string(held->device()));
        std::memset(held->data(), 0, rounded);
        mem_->add(bytes);
        return Buffer(held->data(), bytes, DeviceRef{}, [held, mem = mem_, bytes](void*) mutable {
            held.reset();
            mem->sub(bytes);
        });
    }

    HostMemorySource memory_;  // empty: aligned_alloc
    std::shared_ptr<MemoryCounter> mem_ = std::make_shared<MemoryCounter>();
    cpu::ThreadPool pool_;
    cpu::Exec ex_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
    return std::make_unique<CpuBackend>(threads, HostMemorySource());
}

std::unique_ptr<Backend> make_cpu_backend(int threads, HostMemorySource memory) {
    DF_ASSERT(memory, "make_cpu_backend: an empty host memory source");
    return std::make_unique<CpuBackend>(threads, std::move(memory));
}

std::unique_ptr<Backend> Backend::make_host_backend(int threads) {
    return make_cpu_backend(threads);
}

}  // namespace dflash

// CudaBackend: the Backend interface over the cuda:: ops, plus memory and transfers. Host code
// (built by the C++ compiler). Tested by tests/cuda/*_test.cpp.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/nccl_collectives.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/device.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/graph_cache.h"
#include "backend/cuda/op_workspace.h"

namespace dflash::cuda {
namespace {

class CudaBackend final : public Backend {
  public:
    CudaBackend(int index, const CudaBackendOptions& opt) : dev_(index) {
        hold();
        cudaDeviceProp prop{};
        DF_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
        ex_.stream = dev_.stream();
        ex_.sm_count = prop.multiProcessorCount;
        ex_.device = index;
        ex_.pdl = opt.graphs.programmatic_launch;
        if (opt.op_workspace_bytes > 0) DF_CUDA_CHECK(cudaMalloc(&op_mem_, opt.op_workspace_bytes));
        scratch_ = OpWorkspace(op_mem_, opt.op_workspace_bytes);
        ex_.scratch = &scratch_;
        gemm_ = std::make_unique<GemmEngine>(opt.gemm_workspace_bytes);
        ex_.gemm = gemm_.get();
        graphs_ = std::make_unique<GraphCache>(opt.graphs, dev_.stream(), index, dev_.name(),
                                               [this](StepMode m) { mode_ = m; });
    }
    ~CudaBackend() override {
        int previous = 0;
        if (cudaGetDevice(&previous) != cudaSuccess) previous = dev_.index();
        (void)cudaSetDevice(dev_.index());
        (void)cudaStreamSynchronize(dev_.stream());
        graphs_.reset();
        gemm_.reset();
        if (op_mem_) (void)cudaFree(op_mem_);
        (void)cudaSetDevice(previous);
        if (dev_.held_by_this_thread()) dev_.release();
    }

    std::string name() const override { return dev_.name(); }
    CUstream_st* stream() const { return dev_.stream(); }
    DeviceRef device() const override { return {DeviceKind::cuda, dev_.index()}; }
    DType compute_dtype() const override { return DType::bf16; }

    Buffer allocate(size_t bytes) override {
        hold();
        void* p = nullptr;
        if (bytes > 0) {
            const cudaError_t err = cudaMalloc(&p, bytes);
            if (err != cudaSuccess) {
                (void)cudaGetLastError();
                size_t free_b = 0, total_b = 0;
                (void)cudaMemGetInfo(&free_b, &total_b);
                DF_FAIL("out of memory on {}: {} bytes requested, {} of {} bytes free", name(),
                        bytes, free_b, total_b);
            }
            DF_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, dev_.stream()));
            DF_CUDA_CHECK(cudaStreamSynchronize(dev_.stream()));
        }
        const int index = dev_.index();
        mem_->add(bytes);
        return Buffer(p, bytes, device(), [index, mem = mem_, bytes](void* q) {
            int previous = 0;
            if (cudaGetDevice(&previous) != cudaSuccess) previous = index;
            (void)cudaSetDevice(index);
            (void)cudaFree(q);
            (void)cudaSetDevice(previous);
            mem->sub(bytes);
        });
    }
    MemoryCounters memory_counters() const override { return mem_->read(); }
    void reset_peak_memory() override { mem_->reset_peak(); }
    Buffer allocate_host(size_t bytes) override {
        hold();
        void* p = nullptr;
        if (bytes > 0) DF_CUDA_CHECK(cudaMallocHost(&p, bytes));
        return Buffer(p, bytes, DeviceRef{}, [](void* q) { (void)cudaFreeHost(q); });
    }
    std::unique_ptr<Backend> make_host_backend(int threads) override {
        // Pinned, because a download into pageable memory goes through the driver's bounce
        // buffers: 1.8 GB/s for a checkpoint's snapshot on an H200 (docs/performance.md).
        // Memory the system cannot pin (a large model's snapshot can be a hundred GB) falls back
        // to pageable memory: slower downloads, but the run goes on.
        return make_cpu_backend(threads, [](size_t bytes) {
            void* p = nullptr;
            if (bytes > 0 && cudaMallocHost(&p, bytes) != cudaSuccess) {
                (void)cudaGetLastError();
                p = std::malloc(bytes);
                DF_CHECK(p != nullptr, "cannot allocate {} bytes of host memory", bytes);
                return Buffer(p, bytes, DeviceRef{}, [](void* q) { std::free(q); });
            }
            return Buffer(p, bytes, DeviceRef{}, [](void* q) { (void)cudaFreeHost(q); });
        });
    }

    void upload(const Tensor& dst, const Tensor& src) override {
        hold();
        check_transfer(dst, src, "upload");
        check_device(ex_, dst, "upload", "dst");
        if (src.nbytes() == 0 || mode_ == StepMode::replaying) return;
        DF_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(), cudaMemcpyHostToDevice,
                                      dev_.stream()));
    }
    void download(const Tensor& dst, const Tensor& src) override {
        hold();
        check_transfer(dst, src, "download");
        check_device(ex_, src, "download", "src");
        // A copy into pageable memory blocks this thread behind the work queued before it, so
        // with collectives alive that work is waited for first, boundedly.
        if (watch_) wait_stream();
        if (src.nbytes() > 0)
            DF_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), src.nbytes(),
                                          cudaMemcpyDeviceToHost, dev_.stream()));
        wait_stream();
    }
    void synchronize() override {
        hold();
        wait_stream();
    }

    void run_step(const StepKey& key, const std::function<void()>& record) override {
        hold();
        graphs_->run(key, record);
    }
    uint64_t new_step_owner() override { return graphs_->new_owner(); }
    void release_steps(uint64_t owner) override {
        hold();
        graphs_->release_owner(owner);
    }
    GraphStats graph_stats() const override { return graphs_->stats(); }
    bool recording_step() const override { return mode_ != StepMode::eager; }
    std::unique_ptr<DeviceCollectives> make_device_collectives(
        Communicator& host, const CollectiveOptions& opt) override {
        hold();
        NcclBinding b;
        b.device = dev_.index();
        b.stream = dev_.stream();
        b.replaying = [this] { return mode_ == StepMode::replaying; };
        b.watch = [this](CollectiveWatch* w) { watch_ = w; };
        return make_nccl_collectives(b, host, opt);
    }

    // Every op of backend/op_list.h queues the cuda:: op of the same name on the stream (see run).
#define DFLASH_OP(name, params, args)         \
    void name params override {               \
        run(cuda::name, DFLASH_UNPAREN args); \
    }
#include "backend/op_list.h"

    int64_t lm_head_ce_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                 int64_t chunk) const override {
        return cuda::lm_head_ce_workspace(rows, dim, vocab, chunk);
    }
    int64_t lm_head_kl_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                 int64_t chunk) const override {
        return cuda::lm_head_kl_workspace(rows, dim, vocab, chunk);
    }

    void release() {
        if (owner_.load(std::memory_order_relaxed) != std::this_thread::get_id()) return;
        DF_CUDA_CHECK(cudaStreamSynchronize(dev_.stream()));
        owner_.store(std::thread::id(), std::memory_order_relaxed);
        while (dev_.held_by_this_thread()) dev_.release();
    }

  private:
    // Makes the calling thread this device's driver (the GPU current on it), or fails naming the
    // thread that holds it.
    void hold() {
        if (owner_.load(std::memory_order_relaxed) == std::this_thread::get_id()) return;
        dev_.acquire();
        owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    }
    template <class Fn, class... Args>
    void run(Fn&& fn, Args&&... args) {
        hold();
        if (mode_ == StepMode::replaying) return;  // the graph launched next holds this op
        const OpWorkspace::Scope scope(scratch_);
        fn(ex_, std::forward<Args>(args)...);
    }
    // Waits for the stream. With collectives alive the wait polls, so that a peer that never
    // arrives ends it (CollectiveWatch) instead of blocking this thread for good.
    void wait_stream() {
        if (!watch_) {
            DF_CUDA_CHECK(cudaStreamSynchronize(dev_.stream()));
            return;
        }
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t polls = 0;; ++polls) {
            const cudaError_t e = cudaStreamQuery(dev_.stream());
            if (e == cudaSuccess) return;
            if (e != cudaErrorNotReady) DF_CUDA_CHECK(e);
            // A step's work takes milliseconds: spin briefly, then sleep between polls, and ask
            // the watch about once a millisecond.
            if (polls < 2000) {
                std::this_thread::yield();
                if (polls % 200 != 0) continue;
            } else {
                std::this_thread::sleep_for(std::chrono::microseconds(50));
                if (polls % 20 != 0) continue;
            }
            watch_->check_wait(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    }
    static void check_transfer(const Tensor& dst, const Tensor& src, const char* op) {
        DF_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel(),
                 "{}: dst {} and src {} must have the same dtype and element count", op,
                 dst.describe(), src.describe());
    }

    CudaDevice dev_;
    std::atomic<std::thread::id> owner_{};
    Exec ex_;
    void* op_mem_ = nullptr;
    std::shared_ptr<MemoryCounter> mem_ = std::make_shared<MemoryCounter>();
    OpWorkspace scratch_;
    std::unique_ptr<GemmEngine> gemm_;
    std::unique_ptr<GraphCache> graphs_;
    StepMode mode_ = StepMode::eager;
    CollectiveWatch* watch_ = nullptr;  // the live device collectives', if any
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int index, const CudaBackendOptions& opt) {
    return std::make_unique<CudaBackend>(index, opt);
}

void release_thread(Backend& be) {
    if (auto* cb = dynamic_cast<CudaBackend*>(&be)) cb->release();
}

CUstream_st* stream_of(Backend& be) {
    auto* cb = dynamic_cast<CudaBackend*>(&be);
    DF_CHECK(cb != nullptr, "stream_of: {} is not a CUDA backend", be.name());
    return cb->stream();
}

}  // namespace dflash::cuda

// NCCL collectives loaded at run time (see nccl_collectives.h). Tested by
// tests/cuda/nccl_cuda_test.cpp.
#include "backend/cuda/nccl_collectives.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "comm/communicator.h"
#include "core/error.h"

#if __has_include(<nccl.h>)
#include <nccl.h>
#define DFLASH_HAVE_NCCL_H 1
#endif

namespace dflash::cuda {

#ifdef DFLASH_HAVE_NCCL_H
namespace {

using Clock = std::chrono::steady_clock;

// The NCCL entry points used, resolved from the library by name; revoke is optional (2.28+).
struct NcclApi {
    void* handle = nullptr;
    ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
    ncclResult_t (*comm_init_rank_config)(ncclComm_t*, int, ncclUniqueId, int,
                                          ncclConfig_t*) = nullptr;
    ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                               cudaStream_t) = nullptr;
    ncclResult_t (*reduce_scatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t,
                                   ncclComm_t, cudaStream_t) = nullptr;
    ncclResult_t (*all_gather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t) = nullptr;
    ncclResult_t (*get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
    ncclResult_t (*comm_finalize)(ncclComm_t) = nullptr;
    ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
    ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
    ncclResult_t (*comm_revoke)(ncclComm_t, int) = nullptr;
    const char* (*error_string)(ncclResult_t) = nullptr;
    ncclResult_t (*get_version)(int*) = nullptr;

    explicit NcclApi(const std::string& library) {
        handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
        DF_CHECK(handle != nullptr,
                 "cannot load NCCL from '{}' ({}), which GPU workers need to sum their gradients; "
                 "set runtime.nccl_library to the path of libnccl.so.2 (a PyTorch environment "
                 "has one under nvidia/nccl/lib), or runtime.gradient_exchange=host",
                 library, ::dlerror());
        bind(get_unique_id, "ncclGetUniqueId");
        bind(comm_init_rank_config, "ncclCommInitRankConfig");
        bind(all_reduce, "ncclAllReduce");
        bind(reduce_scatter, "ncclReduceScatter");
        bind(all_gather, "ncclAllGather");
        bind(get_async_error, "ncclCommGetAsyncError");
        bind(comm_finalize, "ncclCommFinalize");
        bind(comm_destroy, "ncclCommDestroy");
        bind(comm_abort, "ncclCommAbort");
        bind(error_string, "ncclGetErrorString");
        bind(get_version, "ncclGetVersion");
        comm_revoke = reinterpret_cast<decltype(comm_revoke)>(::dlsym(handle, "ncclCommRevoke"));
    }
    ~NcclApi() {
        if (handle) ::dlclose(handle);
    }
    NcclApi(const NcclApi&) = delete;
    NcclApi& operator=(const NcclApi&) = delete;

    template <typename F>
    void bind(F& f, const char* name) {
        f = reinterpret_cast<F>(::dlsym(handle, name));
        DF_CHECK(f != nullptr, "the NCCL library has no {}: too old (NCCL 2.14 or newer needed)",
                 name);
    }
    std::string text(ncclResult_t r) const { return error_string ? error_string(r) : "?"; }
};

class NcclCollectives final : public DeviceCollectives, public CollectiveWatch {
  public:
    NcclCollectives(const NcclBinding& b, Communicator& host, const CollectiveOptions& opt)
        : api_(opt.library), b_(b), timeout_s_(opt.timeout_s) {
        ncclUniqueId id{};
        if (host.rank() == 0) {
            const ncclResult_t r = api_.get_unique_id(&id);
            if (r != ncclSuccess)
                throw DeviceError(
                    fmt::format("ncclGetUniqueId failed on cuda:{}: {}", b_.device, api_.text(r)));
        }
        host.broadcast(&id, sizeof(id), 0);
        ranks_ = host.size();
        rank_ = host.rank();
        int previous = 0;
        DF_CUDA_CHECK(cudaGetDevice(&previous));
        DF_CUDA_CHECK(cudaSetDevice(b_.device));
        ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
        config.blocking = 0;  // set-up and collectives return at once; waits are ours to bound
        const ncclResult_t r = api_.comm_init_rank_config(&comm_, ranks_, id, rank_, &config);
        try {
            // Completes when every worker of the run has joined.
            settle(r, "ncclCommInitRankConfig (every worker of the run must join)");
        } catch (...) {
            if (comm_) (void)api_.comm_abort(comm_);  // no destructor runs for this object
            (void)cudaSetDevice(previous);
            throw;
        }
        DF_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
        DF_CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
        DF_CUDA_CHECK(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
        (void)cudaSetDevice(previous);
        int v = 0;
        if (api_.get_version(&v) == ncclSuccess) version_ = v;
        if (b_.watch) b_.watch(this);
    }

    ~NcclCollectives() override {
        if (b_.watch) b_.watch(nullptr);
        if (stopper_.joinable()) stopper_.join();
        int previous = 0;
        if (cudaGetDevice(&previous) != cudaSuccess) previous = b_.device;
        (void)cudaSetDevice(b_.device);
        if (side_) {
            (void)cudaStreamSynchronize(side_);
            (void)cudaStreamDestroy(side_);
            (void)cudaEventDestroy(fork_);
            (void)cudaEventDestroy(joined_);
        }
        if (!comm_) {
            (void)cudaSetDevice(previous);
            return;
        }
        // After a failure the peers may be gone: free locally. Otherwise finish cleanly, but
        // never wait past the timeout for it.
        bool clean = !failed_;
        if (clean) clean = wait_idle(api_.comm_finalize(comm_));
        if (clean)
            (void)api_.comm_destroy(comm_);
        else
            (void)api_.comm_abort(comm_);
        (void)cudaSetDevice(previous);
    }

    void sum(const Tensor& t) override {
        check_tensor(t, "all-reduce");
        if (t.numel() == 0 || b_.replaying()) return;  // a replayed graph holds the op
        settle(api_.all_reduce(t.data(), t.data(), static_cast<size_t>(t.numel()), ncclFloat32,
                               ncclSum, comm_, b_.stream),
               "ncclAllReduce");
    }
    void sum_overlapped(const Tensor& t) override {
        check_tensor(t, "all-reduce");
        if (t.numel() == 0 || b_.replaying()) return;
        // The side stream starts where the backend's stream is now (in a capture this makes it
        // part of the recorded step too).
        DF_CUDA_CHECK(cudaEventRecord(fork_, b_.stream));
        DF_CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
        settle(api_.all_reduce(t.data(), t.data(), static_cast<size_t>(t.numel()), ncclFloat32,
                               ncclSum, comm_, side_),
               "ncclAllReduce (overlapped)");
        side_pending_ = true;
    }
    void join() override {
        if (!side_pending_ || b_.replaying()) return;
        DF_CUDA_CHECK(cudaEventRecord(joined_, side_));
        DF_CUDA_CHECK(cudaStreamWaitEvent(b_.stream, joined_, 0));
        side_pending_ = false;
    }
    void reduce_scatter(const Tensor& t, int64_t chunk) override {
        check_tensor(t, "reduce-scatter");
        check_chunks(t, chunk, "reduce-scatter");
        if (chunk == 0 || b_.replaying()) return;
        float* base = static_cast<float*>(t.data());
        // In place: NCCL's rule is recvbuff == sendbuff + rank * recvcount.
        settle(api_.reduce_scatter(base, base + rank_ * chunk, static_cast<size_t>(chunk),
                                   ncclFloat32, ncclSum, comm_, b_.stream),
               "ncclReduceScatter");
    }
    void all_gather(const Tensor& t, int64_t chunk) override {
        check_tensor(t, "all-gather");
        check_chunks(t, chunk, "all-gather");
        if (chunk == 0 || b_.replaying()) return;
        float* base = static_cast<float*>(t.data());
        // In place: sendbuff == recvbuff + rank * sendcount.
        settle(api_.all_gather(base + rank_ * chunk, base, static_cast<size_t>(chunk), ncclFloat32,
                               comm_, b_.stream),
               "ncclAllGather");
    }

    void abort(const std::string& reason) override {
        std::lock_guard lock(mu_);
        if (abort_requested_.load()) return;
        abort_reason_ = reason;
        abort_requested_.store(true);
    }

    void stop() override { start_stopping(); }

    void check_wait(double waited_s) override {
        if (abort_requested_.load()) {
            std::string why;
            {
                std::lock_guard lock(mu_);
                why = abort_reason_;
            }
            fail(fmt::format("cuda:{} stopped waiting for its peers: {}", b_.device, why));
        }
        if (failed_)  // stopped already: nothing of NCCL's is left to wait for
            DF_FAIL("device collectives on cuda:{} failed earlier in this run", b_.device);
        ncclResult_t st = ncclSuccess;
        if (comm_ && api_.get_async_error(comm_, &st) == ncclSuccess && st != ncclSuccess &&
            st != ncclInProgress)
            fail(fmt::format("NCCL failed on cuda:{}: {}", b_.device, api_.text(st)));
        if (waited_s > timeout_s_)
            fail(fmt::format(
                "cuda:{} waited {:.0f} s for the collectives of its peers "
                "(runtime.collective_timeout_s = {}): another worker of the run stopped, hangs, "
                "or is far slower; NCCL was aborted",
                b_.device, waited_s, timeout_s_));
    }

    std::string describe() const override {
        return fmt::format("NCCL {}.{}.{}, {} ranks", version_ / 10000, version_ / 100 % 100,
                           version_ % 100, ranks_);
    }

  private:
    void check_tensor(const Tensor& t, const char* what) const {
        DF_CHECK(t.device().kind == DeviceKind::cuda && t.device().index == b_.device,
                 "device {} on cuda:{}: the tensor is on {}", what, b_.device,
                 to_string(t.device()));
        DF_CHECK(t.dtype() == DType::f32, "device {} works on f32 tensors", what);
        DF_CHECK(!failed_, "device {} on cuda:{} after the collectives failed", what, b_.device);
    }
    void check_chunks(const Tensor& t, int64_t chunk, const char* what) const {
        DF_CHECK(chunk >= 0 && t.numel() == chunk * ranks_,
                 "device {} of chunks of {} over {} workers needs {} elements, got {}", what, chunk,
                 ranks_, chunk * ranks_, t.numel());
    }

    // A non-blocking call returns ncclInProgress until its work is queued (the set-up: until
    // every worker has joined); nothing else may be called on the communicator meanwhile.
    void settle(ncclResult_t r, const char* what) {
        const auto t0 = Clock::now();
        while (r == ncclInProgress) {
            std::this_thread::sleep_for(std::chrono::microseconds(50));
            if (api_.get_async_error(comm_, &r) != ncclSuccess) break;
            if (r == ncclInProgress)
                check_wait(std::chrono::duration<double>(Clock::now() - t0).count());
        }
        if (r != ncclSuccess)
            fail(fmt::format("NCCL {} failed on cuda:{}: {}", what, b_.device, api_.text(r)));
    }

    // Whether an asynchronous management call (finalize) completed within the timeout.
    bool wait_idle(ncclResult_t r) {
        const auto t0 = Clock::now();
        while (r == ncclInProgress) {
            std::this_thread::sleep_for(std::chrono::microseconds(100));
            if (api_.get_async_error(comm_, &r) != ncclSuccess) return false;
            if (std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s_) return false;
        }
        return r == ncclSuccess;
    }

    // Throws a DeviceError at once, and stops every operation of this communicator on a thread of
    // its own (NCCL may take a while to do so; the device can then finish its stream, so that the
    // unwinding's waits end). The communicator itself is freed only by the destructor, after
    // that thread and once the recorded steps that hold its collectives are gone (revoke); where
    // the library has no revoke, abort stops and frees it at once.
    [[noreturn]] void fail(const std::string& message) {
        start_stopping();
        throw DeviceError(message);
    }
    void start_stopping() {
        if (failed_ || !comm_) return;
        failed_ = true;
        ncclComm_t comm = comm_;
        if (!api_.comm_revoke) comm_ = nullptr;
        stopper_ = std::thread([this, comm] {
            (void)cudaSetDevice(b_.device);
            if (api_.comm_revoke)
                (void)api_.comm_revoke(comm, 0);
            else
                (void)api_.comm_abort(comm);
        });
    }

    NcclApi api_;
    NcclBinding b_;
    double timeout_s_;
    ncclComm_t comm_ = nullptr;
    int ranks_ = 0;
    int rank_ = 0;
    int version_ = 0;
    bool failed_ = false;          // owner thread only
    std::thread stopper_;          // revokes (or aborts) the communicator after a failure
    cudaStream_t side_ = nullptr;  // sum_overlapped's stream
    cudaEvent_t fork_ = nullptr, joined_ = nullptr;
    bool side_pending_ = false;  // overlapped sums not joined yet
    std::mutex mu_;
    std::atomic<bool> abort_requested_{false};
    std::string abort_reason_;  // guarded by mu_
};

}  // namespace

std::unique_ptr<DeviceCollectives> make_nccl_collectives(const NcclBinding& b, Communicator& host,
                                                         const CollectiveOptions& opt) {
    return std::make_unique<NcclCollectives>(b, host, opt);
}

#else

std::unique_ptr<DeviceCollectives> make_nccl_collectives(const NcclBinding&, Communicator&,
                                                         const CollectiveOptions&) {
    DF_FAIL(
        "this build found no nccl.h, so GPU workers cannot sum on the devices; use "
        "runtime.gradient_exchange=host");
}

#endif

}  // namespace dflash::cuda

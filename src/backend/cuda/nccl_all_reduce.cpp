// NCCL all-reduce loaded at run time (see nccl_all_reduce.h). Tested by
// tests/cuda/nccl_cuda_test.cpp.
#include "backend/cuda/nccl_all_reduce.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

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

// The few NCCL entry points used, resolved from the library by name.
struct NcclApi {
    void* handle = nullptr;
    ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
    ncclResult_t (*comm_init_rank)(ncclComm_t*, int, ncclUniqueId, int) = nullptr;
    ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                               cudaStream_t) = nullptr;
    ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
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
        bind(comm_init_rank, "ncclCommInitRank");
        bind(all_reduce, "ncclAllReduce");
        bind(comm_destroy, "ncclCommDestroy");
        bind(error_string, "ncclGetErrorString");
        bind(get_version, "ncclGetVersion");
    }
    ~NcclApi() {
        if (handle) ::dlclose(handle);
    }
    NcclApi(const NcclApi&) = delete;
    NcclApi& operator=(const NcclApi&) = delete;

    template <typename F>
    void bind(F& f, const char* name) {
        f = reinterpret_cast<F>(::dlsym(handle, name));
        DF_CHECK(f != nullptr, "the NCCL library has no {}: too old (NCCL 2.x needed)", name);
    }
    void check(ncclResult_t r, const char* what, int device) const {
        DF_CHECK(r == ncclSuccess, "NCCL {} failed on cuda:{}: {}", what, device,
                 error_string ? error_string(r) : "?");
    }
};

class NcclAllReduce final : public DeviceAllReduce {
  public:
    NcclAllReduce(int device, cudaStream_t stream, Communicator& host, const std::string& library,
                  std::function<bool()> replaying)
        : api_(library), device_(device), stream_(stream), replaying_(std::move(replaying)) {
        ncclUniqueId id{};
        if (host.rank() == 0) api_.check(api_.get_unique_id(&id), "ncclGetUniqueId", device);
        host.broadcast(&id, sizeof(id), 0);
        int previous = 0;
        DF_CUDA_CHECK(cudaGetDevice(&previous));
        DF_CUDA_CHECK(cudaSetDevice(device));
        // Blocks until every worker of the run has called it.
        const ncclResult_t r = api_.comm_init_rank(&comm_, host.size(), id, host.rank());
        (void)cudaSetDevice(previous);
        api_.check(r, "ncclCommInitRank", device);
        ranks_ = host.size();
        int v = 0;
        if (api_.get_version(&v) == ncclSuccess) version_ = v;
    }
    ~NcclAllReduce() override {
        if (comm_) (void)api_.comm_destroy(comm_);
    }

    void sum(const Tensor& t) override {
        DF_CHECK(t.device().kind == DeviceKind::cuda && t.device().index == device_,
                 "device all-reduce on cuda:{}: the tensor is on {}", device_,
                 to_string(t.device()));
        DF_CHECK(t.dtype() == DType::f32, "device all-reduce sums f32 tensors");
        if (t.numel() == 0 || replaying_()) return;  // a replayed graph holds the sum
        api_.check(api_.all_reduce(t.data(), t.data(), static_cast<size_t>(t.numel()), ncclFloat32,
                                   ncclSum, comm_, stream_),
                   "ncclAllReduce", device_);
    }

    std::string describe() const override {
        return fmt::format("NCCL {}.{}.{}, {} ranks", version_ / 10000, version_ / 100 % 100,
                           version_ % 100, ranks_);
    }

  private:
    NcclApi api_;
    int device_;
    cudaStream_t stream_;
    std::function<bool()> replaying_;
    ncclComm_t comm_ = nullptr;
    int ranks_ = 0;
    int version_ = 0;
};

}  // namespace

std::unique_ptr<DeviceAllReduce> make_nccl_all_reduce(int device, CUstream_st* stream,
                                                      Communicator& host,
                                                      const std::string& library,
                                                      std::function<bool()> replaying) {
    return std::make_unique<NcclAllReduce>(device, stream, host, library, std::move(replaying));
}

#else

std::unique_ptr<DeviceAllReduce> make_nccl_all_reduce(int, CUstream_st*, Communicator&,
                                                      const std::string&, std::function<bool()>) {
    DF_FAIL(
        "this build found no nccl.h, so GPU workers cannot sum on the devices; use "
        "runtime.gradient_exchange=host");
}

#endif

}  // namespace dflash::cuda

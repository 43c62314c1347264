// CudaDevice, DeviceBuffer, device_count and the DF_CUDA_CHECK error path. Host code only (built
// by the C++ compiler into dflash_lib, with the rest of src/backend/cuda). Tested by
// tests/cuda/cuda_device_test.cpp.
#include "backend/cuda/device.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <cstring>
#include <sstream>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace dflash::cuda {

namespace detail {

namespace {

std::string current_device() {
    int dev = -1;
    return cudaGetDevice(&dev) == cudaSuccess ? fmt::format("cuda:{}", dev) : "no current device";
}

std::string origin(const char* file, int line) {
    const char* slash = std::strrchr(file, '/');
    return fmt::format("{}:{}", slash ? slash + 1 : file, line);
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* stmt, const char* file, int line) {
    const std::string where = origin(file, line);
    throw DeviceError(fmt::format("CUDA error {} ({}) in `{}` at {} on {}", cudaGetErrorName(err),
                                  cudaGetErrorString(err), stmt, where, current_device()),
                      where);
}

void throw_library_error(const char* library, const char* status, const char* description,
                         const char* stmt, const char* file, int line) {
    const std::string where = origin(file, line);
    throw DeviceError(fmt::format("{} error {} ({}) in `{}` at {} on {}", library, status,
                                  description, stmt, where, current_device()),
                      where);
}

}  // namespace detail

namespace {

std::string thread_name(std::thread::id id) {
    std::ostringstream s;
    s << id;
    return s.str();
}

}  // namespace

int device_count() noexcept {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the error so it does not surface at a later check
        return 0;
    }
    return n;
}

CudaDevice::CudaDevice(int index) : index_(index), name_(fmt::format("cuda:{}", index)) {
    const int n = device_count();
    DF_CHECK(index >= 0 && index < n, "CUDA device {} requested but {} visible (ids 0..{}){}",
             index, n == 0 ? "none is" : fmt::format("{} are", n), n - 1,
             n == 0 ? "; check the driver and CUDA_VISIBLE_DEVICES" : "");
    int previous = 0;
    DF_CUDA_CHECK(cudaGetDevice(&previous));
    DF_CUDA_CHECK(cudaSetDevice(index));
    cudaStream_t s = nullptr;
    const cudaError_t err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    (void)cudaSetDevice(previous);
    DF_CUDA_CHECK(err);
    stream_ = s;
}

CudaDevice::~CudaDevice() {
    // Destructors must not throw: errors here are ignored, the process is tearing down the device.
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = index_;
    if (cudaSetDevice(index_) == cudaSuccess && stream_) {
        (void)cudaStreamSynchronize(stream_);
        (void)cudaStreamDestroy(stream_);
    }
    (void)cudaSetDevice(previous);
}

void CudaDevice::acquire() {
    const auto me = std::this_thread::get_id();
    {
        std::lock_guard lock(owner_mutex_);
        DF_CHECK(depth_ == 0 || owner_ == me,
                 "{} is held by thread {} but thread {} tried to use it; drive a device from one "
                 "thread at a time (release it, or use one device per worker)",
                 name_, thread_name(owner_), thread_name(me));
        owner_ = me;
        ++depth_;
    }
    // The current device is per host thread: a fresh thread must select it before any call.
    try {
        DF_CUDA_CHECK(cudaSetDevice(index_));
    } catch (...) {
        release();
        throw;
    }
}

void CudaDevice::release() {
    std::lock_guard lock(owner_mutex_);
    DF_ASSERT(depth_ > 0 && owner_ == std::this_thread::get_id(),
              "{} released by thread {} that does not hold it", name_,
              thread_name(std::this_thread::get_id()));
    if (--depth_ == 0) owner_ = std::thread::id();
}

bool CudaDevice::held_by_this_thread() const {
    std::lock_guard lock(owner_mutex_);
    return depth_ > 0 && owner_ == std::this_thread::get_id();
}

void CudaDevice::check_held(const char* what) const {
    DF_CHECK(held_by_this_thread(),
             "{} on {} from thread {}, which does not hold the device; acquire() it first (or "
             "hold a CudaDevice::Guard)",
             what, name_, thread_name(std::this_thread::get_id()));
}

void CudaDevice::synchronize() {
    check_held("synchronize");
    DF_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

DeviceBuffer::DeviceBuffer(CudaDevice& dev, size_t bytes) : dev_(dev), bytes_(bytes) {
    dev_.check_held("DeviceBuffer allocation");
    if (bytes > 0) DF_CUDA_CHECK(cudaMalloc(&data_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
    if (!data_) return;
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) previous = dev_.index();
    if (cudaSetDevice(dev_.index()) == cudaSuccess) (void)cudaFree(data_);
    (void)cudaSetDevice(previous);
}

void DeviceBuffer::upload(const void* host, size_t bytes) {
    DF_CHECK(bytes <= bytes_, "upload of {} bytes into a {}-byte device buffer", bytes, bytes_);
    dev_.check_held("DeviceBuffer::upload");
    if (bytes == 0) return;
    DF_CUDA_CHECK(cudaMemcpyAsync(data_, host, bytes, cudaMemcpyHostToDevice, dev_.stream()));
    DF_CUDA_CHECK(cudaStreamSynchronize(dev_.stream()));
}

void DeviceBuffer::download(void* host, size_t bytes) const {
    DF_CHECK(bytes <= bytes_, "download of {} bytes from a {}-byte device buffer", bytes, bytes_);
    dev_.check_held("DeviceBuffer::download");
    if (bytes == 0) return;
    DF_CUDA_CHECK(cudaMemcpyAsync(host, data_, bytes, cudaMemcpyDeviceToHost, dev_.stream()));
    DF_CUDA_CHECK(cudaStreamSynchronize(dev_.stream()));
}

}  // namespace dflash::cuda

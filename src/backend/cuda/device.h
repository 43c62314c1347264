// CudaDevice: one GPU as an object (docs/design.md "Memory and threads"): its index and its own
// non-blocking stream. Any thread may drive it, one thread at a time: a thread acquire()s it (or
// holds a Guard), which makes the GPU current on that thread and records the owner; use from a
// second thread at the same time is an error, not a race. Also DeviceBuffer (device memory for
// setup and tests). This header needs no CUDA headers, so plain C++ code can hold devices. Tested
// by tests/cuda/cuda_device_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace dflash::cuda {

// Number of visible CUDA devices; 0 when there is no driver or no GPU. Never throws.
int device_count() noexcept;

class CudaDevice {
  public:
    // Creates the device's non-blocking stream; the calling thread's current device is left as it
    // was. Any thread may construct it; it is not held afterwards.
    explicit CudaDevice(int index);
    ~CudaDevice();
    CudaDevice(const CudaDevice&) = delete;
    CudaDevice& operator=(const CudaDevice&) = delete;

    int index() const { return index_; }
    const std::string& name() const { return name_; }  // "cuda:0"

    // Makes the calling thread this device's driver and the GPU current on it. Re-entrant on the
    // owning thread; throws dflash::Error if another thread holds the device.
    void acquire();
    void release();
    bool held_by_this_thread() const;
    // Throws unless the calling thread holds the device; `what` names the operation.
    void check_held(const char* what) const;

    // The device's own stream; every operation on this device is ordered on it.
    CUstream_st* stream() const { return stream_; }
    // Waits for the device's stream (not the whole device: that would break open graph captures).
    void synchronize();

    class Guard {
      public:
        explicit Guard(CudaDevice& dev) : dev_(dev) { dev_.acquire(); }
        ~Guard() { dev_.release(); }
        Guard(const Guard&) = delete;
        Guard& operator=(const Guard&) = delete;

      private:
        CudaDevice& dev_;
    };

  private:
    int index_;
    std::string name_;
    CUstream_st* stream_ = nullptr;
    mutable std::mutex owner_mutex_;
    std::thread::id owner_;  // empty while nobody holds it
    int depth_ = 0;
};

// Device memory on one GPU. Allocation and free synchronise the device, so buffers are made at
// setup time (never while a graph may be capturing). Copies run on the device's stream and wait.
class DeviceBuffer {
  public:
    DeviceBuffer(CudaDevice& dev, size_t bytes);  // the calling thread must hold dev
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void* data() const { return data_; }
    float* f32() const { return static_cast<float*>(data_); }
    size_t bytes() const { return bytes_; }
    void upload(const void* host, size_t bytes);
    void download(void* host, size_t bytes) const;

  private:
    CudaDevice& dev_;
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace dflash::cuda

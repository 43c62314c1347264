// Owned memory on a backend's device: Buffer (bytes) and DeviceTensor (a Buffer with a Tensor
// view). Both are made at setup time through Backend::allocate (never inside a step: on CUDA an
// allocation can synchronise the device, which would break an open graph capture) and freed by the
// backend that made them, which must outlive them. Move-only; copies are explicit (Backend::copy).
// Tested by tests/backend/workspace_test.cpp and, on CUDA, tests/cuda/cuda_backend_test.cpp.
#pragma once

#include <cstddef>
#include <functional>

#include "core/tensor.h"

namespace dflash {

class Backend;

class Buffer {
  public:
    using Free = std::function<void(void*)>;
    Buffer() = default;
    Buffer(void* data, size_t bytes, DeviceRef device, Free free)
        : data_(data), bytes_(bytes), device_(device), free_(std::move(free)) {}
    ~Buffer() { reset(); }
    Buffer(Buffer&& o) noexcept { *this = std::move(o); }
    Buffer& operator=(Buffer&& o) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void* data() const { return data_; }
    size_t bytes() const { return bytes_; }
    DeviceRef device() const { return device_; }
    void reset();

  private:
    void* data_ = nullptr;
    size_t bytes_ = 0;
    DeviceRef device_;
    Free free_;
};

class DeviceTensor {
  public:
    DeviceTensor() = default;
    // Zero-filled storage for `shape` on the backend's device.
    DeviceTensor(Backend& be, Shape shape, DType dtype);

    Tensor view() const { return view_; }
    operator Tensor() const { return view_; }  // NOLINT: usable where a view is
    const Shape& shape() const { return view_.shape(); }
    DType dtype() const { return view_.dtype(); }
    int64_t numel() const { return view_.numel(); }
    int64_t dim(int i) const { return view_.dim(i); }
    size_t nbytes() const { return view_.nbytes(); }
    bool empty() const { return view_.empty(); }
    DeviceRef device() const { return view_.device(); }

  private:
    Buffer storage_;
    Tensor view_;
};

// A copy of `t` (on any device) in host memory, converted to f32 (bf16 widened, f32 as is; i32
// refused). Waits for the device. Used by checkpointing and tests, never inside a step.
HostTensor to_host_f32(Backend& be, const Tensor& t);
// A host f32 tensor copied into `dst` on the backend's device, converted to dst's dtype.
void from_host_f32(Backend& be, const Tensor& dst, const Tensor& host_f32);

}  // namespace dflash

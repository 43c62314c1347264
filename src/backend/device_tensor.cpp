// Owned device memory and host <-> device f32 copies. Tested by tests/backend/workspace_test.cpp.
#include "backend/device_tensor.h"

#include <utility>

#include "backend/backend.h"

namespace dflash {

Buffer& Buffer::operator=(Buffer&& o) noexcept {
    if (this != &o) {
        reset();
        data_ = std::exchange(o.data_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
        device_ = o.device_;
        free_ = std::move(o.free_);
        o.free_ = nullptr;
    }
    return *this;
}

void Buffer::reset() {
    if (data_ && free_) free_(data_);
    data_ = nullptr;
    bytes_ = 0;
    free_ = nullptr;
}

DeviceTensor::DeviceTensor(Backend& be, Shape shape, DType dtype) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    storage_ = be.allocate(bytes);
    view_ = Tensor(storage_.data(), dtype, shape, be.device());
}

HostTensor to_host_f32(Backend& be, const Tensor& t) {
    DF_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16,
             "to_host_f32: {} is not a floating-point tensor", t.describe());
    HostTensor out(t.shape(), DType::f32);
    if (t.numel() == 0) return out;
    if (t.dtype() == DType::f32) {
        be.download(out.view(), t);
        return out;
    }
    HostTensor raw(t.shape(), t.dtype());
    be.download(raw.view(), t);
    const uint16_t* s = raw.view().bf16();
    for (int64_t i = 0; i < t.numel(); ++i) out.f32()[i] = bf16_to_f32(s[i]);
    return out;
}

void from_host_f32(Backend& be, const Tensor& dst, const Tensor& host_f32) {
    DF_CHECK(host_f32.dtype() == DType::f32 && host_f32.numel() == dst.numel(),
             "from_host_f32: {} into {}", host_f32.describe(), dst.describe());
    if (dst.numel() == 0) return;
    if (dst.dtype() == DType::f32) {
        be.upload(dst, host_f32);
        be.synchronize();  // the host source may go away once this returns
        return;
    }
    DF_CHECK(dst.dtype() == DType::bf16, "from_host_f32: cannot convert f32 into {}",
             dst.describe());
    HostTensor raw(dst.shape(), DType::bf16);
    for (int64_t i = 0; i < dst.numel(); ++i) raw.view().bf16()[i] = f32_to_bf16(host_f32.f32()[i]);
    be.upload(dst, raw.view());
    be.synchronize();
}

}  // namespace dflash

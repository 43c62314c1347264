// Tensor: a non-owning view (data, dtype, shape, device). HostTensor: an owning CPU buffer.
// Row-major, contiguous. Shape letters follow docs/design.md "Shape letters" (S sequence, D hidden,
// H heads, ...). Tested by tests/core/tensor_test.cpp.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace dflash {

enum class DeviceKind : uint8_t { cpu, cuda };

struct DeviceRef {
    DeviceKind kind = DeviceKind::cpu;
    int index = 0;
    bool operator==(const DeviceRef&) const = default;
};

std::string to_string(DeviceRef d);

class Shape {
  public:
    static constexpr int kMaxRank = 5;

    Shape() = default;
    Shape(std::initializer_list<int64_t> dims);
    explicit Shape(const std::vector<int64_t>& dims);

    int rank() const { return rank_; }
    int64_t operator[](int i) const;
    int64_t numel() const;
    std::vector<int64_t> to_vector() const { return {dims_.begin(), dims_.begin() + rank_}; }
    std::string to_string() const;  // "[3, 4]"
    bool operator==(const Shape& o) const;

  private:
    std::array<int64_t, kMaxRank> dims_{};
    int rank_ = 0;
};

class Tensor {
  public:
    Tensor() = default;
    Tensor(void* data, DType dtype, Shape shape, DeviceRef device = {})
        : data_(data), dtype_(dtype), shape_(shape), device_(device) {}

    void* data() const { return data_; }
    DType dtype() const { return dtype_; }
    const Shape& shape() const { return shape_; }
    DeviceRef device() const { return device_; }
    int rank() const { return shape_.rank(); }
    int64_t dim(int i) const { return shape_[i]; }
    int64_t numel() const { return shape_.numel(); }
    size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
    bool empty() const { return data_ == nullptr || numel() == 0; }

    // Typed pointers; each checks the dtype.
    float* f32() const;
    int32_t* i32() const;
    uint16_t* bf16() const;
    uint8_t* u8() const;

    // Same data, another shape with the same element count.
    Tensor reshape(Shape s) const;
    // Rows [begin, end) of dimension 0.
    Tensor rows(int64_t begin, int64_t end) const;

    std::string describe() const;  // "f32[3, 4]@cpu"

  private:
    void* data_ = nullptr;
    DType dtype_ = DType::f32;
    Shape shape_;
    DeviceRef device_;
};

// Owning CPU tensor (64-byte aligned). Movable, not copyable: copies are explicit (`clone`).
class HostTensor {
  public:
    HostTensor() = default;
    HostTensor(Shape shape, DType dtype = DType::f32);  // zero-filled
    HostTensor(HostTensor&&) noexcept = default;
    HostTensor& operator=(HostTensor&&) noexcept = default;
    HostTensor(const HostTensor&) = delete;
    HostTensor& operator=(const HostTensor&) = delete;

    static HostTensor from_f32(Shape shape, const std::vector<float>& values);
    static HostTensor from_i32(Shape shape, const std::vector<int32_t>& values);
    HostTensor clone() const;

    Tensor view() const { return view_; }
    operator Tensor() const { return view_; }  // NOLINT: a HostTensor is usable where a view is
    float* f32() const { return view_.f32(); }
    int32_t* i32() const { return view_.i32(); }
    const Shape& shape() const { return view_.shape(); }
    DType dtype() const { return view_.dtype(); }
    int64_t numel() const { return view_.numel(); }
    int64_t dim(int i) const { return view_.dim(i); }
    size_t nbytes() const { return view_.nbytes(); }
    bool empty() const { return view_.empty(); }

  private:
    struct Free {
        void operator()(void* p) const;
    };
    std::unique_ptr<void, Free> storage_;
    Tensor view_;
};

// Fills and copies that the whole project uses on CPU views.
void fill_f32(const Tensor& t, float value);
void copy_tensor(const Tensor& dst, const Tensor& src);  // same dtype and numel

}  // namespace dflash

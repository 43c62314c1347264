// Tensor views and owning host buffers. Tested by tests/core/tensor_test.cpp.
#include "core/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace dflash {

std::string to_string(DeviceRef d) {
    return d.kind == DeviceKind::cpu ? "cpu" : fmt::format("cuda:{}", d.index);
}

Shape::Shape(std::initializer_list<int64_t> dims) : Shape(std::vector<int64_t>(dims)) {}

Shape::Shape(const std::vector<int64_t>& dims) {
    DF_CHECK(dims.size() <= static_cast<size_t>(kMaxRank), "tensor rank {} exceeds the maximum {}",
             dims.size(), kMaxRank);
    rank_ = static_cast<int>(dims.size());
    for (int i = 0; i < rank_; ++i) {
        DF_CHECK(dims[i] >= 0, "negative dimension {} at axis {}", dims[i], i);
        dims_[i] = dims[i];
    }
}

int64_t Shape::operator[](int i) const {
    if (i < 0) i += rank_;
    DF_ASSERT(i >= 0 && i < rank_, "axis {} out of range for rank {}", i, rank_);
    return dims_[i];
}

int64_t Shape::numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
}

std::string Shape::to_string() const {
    std::string s = "[";
    for (int i = 0; i < rank_; ++i) s += fmt::format("{}{}", i ? ", " : "", dims_[i]);
    return s + "]";
}

bool Shape::operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
        if (dims_[i] != o.dims_[i]) return false;
    return true;
}

float* Tensor::f32() const {
    DF_ASSERT(dtype_ == DType::f32, "tensor {} accessed as f32", describe());
    return static_cast<float*>(data_);
}

int32_t* Tensor::i32() const {
    DF_ASSERT(dtype_ == DType::i32, "tensor {} accessed as i32", describe());
    return static_cast<int32_t*>(data_);
}

uint16_t* Tensor::bf16() const {
    DF_ASSERT(dtype_ == DType::bf16, "tensor {} accessed as bf16", describe());
    return static_cast<uint16_t*>(data_);
}

uint8_t* Tensor::u8() const {
    DF_ASSERT(dtype_ == DType::u8, "tensor {} accessed as u8", describe());
    return static_cast<uint8_t*>(data_);
}

Tensor Tensor::reshape(Shape s) const {
    DF_ASSERT(s.numel() == numel(), "reshape {} -> {} changes the element count",
              shape_.to_string(), s.to_string());
    return Tensor(data_, dtype_, s, device_);
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
    DF_ASSERT(rank() >= 1 && begin >= 0 && begin <= end && end <= dim(0), "rows [{}, {}) of {}",
              begin, end, describe());
    std::vector<int64_t> dims = shape_.to_vector();
    const int64_t row_elems = dims[0] == 0 ? 0 : numel() / dims[0];
    dims[0] = end - begin;
    auto* base = static_cast<char*>(data_) + begin * row_elems * dtype_size(dtype_);
    return Tensor(base, dtype_, Shape(dims), device_);
}

std::string Tensor::describe() const {
    return fmt::format("{}{}@{}", dtype_name(dtype_), shape_.to_string(), to_string(device_));
}

void HostTensor::Free::operator()(void* p) const {
    std::free(p);
}

HostTensor::HostTensor(Shape shape, DType dtype) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* p = std::aligned_alloc(64, rounded);
    DF_CHECK(p != nullptr, "out of host memory allocating {} bytes for a {} tensor {}", rounded,
             dtype_name(dtype), shape.to_string());
    std::memset(p, 0, rounded);
    storage_.reset(p);
    view_ = Tensor(p, dtype, shape);
}

HostTensor HostTensor::from_f32(Shape shape, const std::vector<float>& values) {
    DF_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
             "{} values given for a tensor of shape {}", values.size(), shape.to_string());
    HostTensor t(shape, DType::f32);
    std::copy(values.begin(), values.end(), t.f32());
    return t;
}

HostTensor HostTensor::from_i32(Shape shape, const std::vector<int32_t>& values) {
    DF_CHECK(static_cast<int64_t>(values.size()) == shape.numel(),
             "{} values given for a tensor of shape {}", values.size(), shape.to_string());
    HostTensor t(shape, DType::i32);
    std::copy(values.begin(), values.end(), t.i32());
    return t;
}

HostTensor HostTensor::clone() const {
    HostTensor t(shape(), dtype());
    if (nbytes() > 0) std::memcpy(t.view().data(), view_.data(), nbytes());
    return t;
}

void fill_f32(const Tensor& t, float value) {
    float* p = t.f32();
    std::fill(p, p + t.numel(), value);
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
    DF_ASSERT(dst.dtype() == src.dtype() && dst.numel() == src.numel(), "copy {} <- {}",
              dst.describe(), src.describe());
    if (src.nbytes() > 0) std::memmove(dst.data(), src.data(), src.nbytes());
}

}  // namespace dflash

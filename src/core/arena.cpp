// Bump allocation over one block. Tested by tests/core/tensor_test.cpp.
#include "core/arena.h"

#include <algorithm>
#include <cstring>

namespace dflash {

Arena::Arena(size_t capacity_bytes)
    : block_(Shape{static_cast<int64_t>((capacity_bytes + 3) / 4)}, DType::i32),
      capacity_(capacity_bytes) {}

Tensor Arena::alloc(Shape shape, DType dtype) {
    const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
    const size_t aligned = (bytes + 63) / 64 * 64;
    DF_CHECK(used_ + aligned <= capacity_,
             "arena exhausted: {} bytes requested for {}{} with {} of {} bytes in use; plan a "
             "larger arena",
             bytes, dtype_name(dtype), shape.to_string(), used_, capacity_);
    char* p = static_cast<char*>(block_.view().data()) + used_;
    std::memset(p, 0, bytes);
    used_ += aligned;
    high_water_ = std::max(high_water_, used_);
    return Tensor(p, dtype, shape);
}

void Arena::reset() {
    used_ = 0;
}

}  // namespace dflash

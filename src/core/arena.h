// Arena: planned allocations with stable addresses. A user asks for its buffers up front; the arena
// hands out aligned slices of one block and never moves them, and `reset` frees them all at once.
// Exhaustion is an error naming the request, never a silent reallocation (design §2: buffers are
// planned so graph capture stays safe). Tested by tests/core/tensor_test.cpp.
#pragma once

#include <cstddef>

#include "core/tensor.h"

namespace dflash {

class Arena {
  public:
    explicit Arena(size_t capacity_bytes);

    // A zero-filled tensor carved from the arena.
    Tensor alloc(Shape shape, DType dtype = DType::f32);
    Tensor alloc_like(const Tensor& t) { return alloc(t.shape(), t.dtype()); }
    void reset();  // every tensor handed out so far becomes invalid

    size_t used() const { return used_; }
    size_t capacity() const { return capacity_; }
    size_t high_water() const { return high_water_; }

  private:
    HostTensor block_;
    size_t capacity_ = 0;
    size_t used_ = 0;
    size_t high_water_ = 0;
};

}  // namespace dflash

// Scratch: named, reusable host buffers. A buffer keeps its address while the requested size does
// not grow, so a steady-state step allocates nothing. Owned by whoever runs the model (a session or
// a worker), never shared between threads. Tested through its users: tests/model/*_test.cpp.
#pragma once

#include <map>
#include <string>

#include "core/tensor.h"

namespace dflash {

class Scratch {
  public:
    // A zero-filled-on-first-use f32/i32 view of `shape` under `key`; contents are unspecified
    // after the first call (callers overwrite them).
    Tensor get(const std::string& key, Shape shape, DType dtype = DType::f32) {
        HostTensor& buf = bufs_[key];
        const int64_t need = shape.numel();
        if (buf.empty() || buf.dtype() != dtype || buf.numel() < need)
            buf = HostTensor(Shape{need < 1 ? 1 : need}, dtype);
        return Tensor(buf.view().data(), dtype, shape);
    }
    size_t bytes() const {
        size_t n = 0;
        for (const auto& [k, b] : bufs_) n += b.nbytes();
        return n;
    }

  private:
    std::map<std::string, HostTensor> bufs_;
};

}  // namespace dflash

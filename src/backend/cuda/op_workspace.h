// OpWorkspace: device memory for op temporaries (two-stage reduction partials, split-KV partial
// results, sort buffers), carved from one allocation made when the backend is created and given
// back by stack discipline (mark/release around each op). Ops never allocate: a request larger
// than the workspace is an error naming it and the setting that sizes it.
// Tested by tests/cuda/cuda_backend_test.cpp.
#pragma once

#include <cstddef>

namespace dflash::cuda {

class OpWorkspace {
  public:
    OpWorkspace() = default;
    OpWorkspace(void* base, size_t bytes) : base_(static_cast<char*>(base)), capacity_(bytes) {}

    // `bytes` of device memory, 256-byte aligned; `what` names the request in the error.
    void* take(size_t bytes, const char* what);
    template <class T>
    T* take_n(size_t n, const char* what) {
        return static_cast<T*>(take(n * sizeof(T), what));
    }
    size_t mark() const { return used_; }
    void release(size_t mark) { used_ = mark; }
    size_t capacity() const { return capacity_; }
    // Bytes a take() can still get (before its 256-byte rounding).
    size_t available() const { return capacity_ - used_; }
    size_t high_water() const { return high_; }

    // Gives everything taken inside its scope back.
    class Scope {
      public:
        explicit Scope(OpWorkspace& ws) : ws_(ws), mark_(ws.mark()) {}
        ~Scope() { ws_.release(mark_); }
        Scope(const Scope&) = delete;
        Scope& operator=(const Scope&) = delete;

      private:
        OpWorkspace& ws_;
        size_t mark_;
    };

  private:
    char* base_ = nullptr;
    size_t capacity_ = 0;
    size_t used_ = 0;
    size_t high_ = 0;
};

}  // namespace dflash::cuda

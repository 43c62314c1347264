// Element-wise ops on a CudaDevice: argument and ownership checks, then the launchers in
// elementwise.cu. Tested by tests/cuda/cuda_add_test.cpp.
#include "backend/cuda/kernels/elementwise.h"

#include "backend/cuda/kernels/elementwise_launch.h"
#include "core/error.h"

namespace dflash::cuda {

void add_inplace(CudaDevice& dev, float* y, const float* x, int64_t n, float alpha) {
    DF_CHECK(n >= 0, "add_inplace: n={} but element counts are non-negative", n);
    dev.check_held("add_inplace");
    if (n == 0) return;
    DF_CHECK(y != nullptr && x != nullptr,
             "add_inplace: null device pointer (y={}, x={}) with n={}", static_cast<const void*>(y),
             static_cast<const void*>(x), n);
    detail::launch_add_inplace(dev.stream(), y, x, n, alpha);
}

}  // namespace dflash::cuda

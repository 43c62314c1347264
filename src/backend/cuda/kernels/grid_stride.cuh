// The plain grid-stride loop of the one-thread-per-element kernels (kernels/{dyn_conv,
// selector_scores}.cu): fn(e) for every e in [0, n), each index by exactly one thread. Tested
// through tests/cuda/{dyn_conv,selector_scores}_cuda_test.cpp.
#pragma once

#include <cstdint>

namespace dflash::cuda::kernels {

template <class Fn>
__device__ __forceinline__ void for_each_index(int64_t n, Fn&& fn) {
    for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < n;
         e += int64_t{gridDim.x} * blockDim.x)
        fn(e);
}

}  // namespace dflash::cuda::kernels

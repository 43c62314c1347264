// dpace_weights: one thread per block of slots, in double. The suffix sums run backward over the
// slots and each survival product C_k is recomputed from slot 0 with the multiplications in the
// CPU reference's order (O(block^2), nothing stored: blocks are the drafter's block size, 16 or
// so), so the two agree to the rounding of exp.
// Tested by tests/cuda/dpace_weights_cuda_test.cpp.
#include "backend/cuda/kernels/dpace_weights.h"

#include "backend/cuda/cuda_check.h"

namespace dflash::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads)
    dpace_weights_kernel(const float* ce, const float* weights, int64_t blocks, int64_t block,
                         double alpha, float* out) {
    const int64_t b = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
    if (b >= blocks) return;
    const float* l = ce + b * block;
    const float* w = weights + b * block;
    float* o = out + b * block;
    double tail = 0.0;
    for (int64_t k = block - 1; k >= 0; --k) {
        if (!(w[k] > 0.0f)) {
            o[k] = 0.0f;
            continue;
        }
        double prod = 1.0;
        for (int64_t i = 0; i <= k; ++i)
            if (w[i] > 0.0f) prod *= (1.0 - alpha) * exp(-static_cast<double>(l[i])) + alpha;
        tail += prod;
        o[k] = static_cast<float>(static_cast<double>(w[k]) * tail);
    }
}

}  // namespace

void dpace_weights_rows(const float* ce, const float* weights, int64_t rows, int64_t block,
                        float alpha, float* out, CUstream_st* stream) {
    const int64_t blocks = rows / block;
    if (blocks == 0) return;
    const auto grid = static_cast<unsigned>((blocks + kThreads - 1) / kThreads);
    dpace_weights_kernel<<<grid, kThreads, 0, stream>>>(ce, weights, blocks, block, alpha, out);
    DF_CUDA_CHECK_LAUNCH(dpace_weights_kernel);
}

}  // namespace dflash::cuda

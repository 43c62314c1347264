// confidence_bce: one block of 1024 threads walks the rows (a few thousand at most: the drafted
// slots of one micro-batch), in double as the CPU reference, and sums the bias gradient with the
// fixed-order block reduction, so the bits depend on the row count only.
// Tested by tests/cuda/confidence_bce_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/block_reduce.cuh"
#include "backend/cuda/kernels/confidence_bce.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

constexpr int kBceThreads = 1024;

__global__ void __launch_bounds__(kBceThreads)
    confidence_bce_kernel(const uint16_t* __restrict__ z, const float* __restrict__ tv,
                          const float* __restrict__ weights, const float* __restrict__ grad_weights,
                          double alpha, int64_t rows, float* __restrict__ loss_rows,
                          uint16_t* __restrict__ dz, float* __restrict__ dbias) {
    __shared__ BlockScratch<kBceThreads> scratch;
    double bias = 0.0;
    for (int64_t i = threadIdx.x; i < rows; i += kBceThreads) {
        const double zi = bf16_bits_to_f32(z[i]);
        const double target = fmin(fmax(1.0 - static_cast<double>(tv[i]), 0.0), 1.0);
        if (weights[i] > 0.0f) {
            const double sp = fmax(zi, 0.0) + log1p(exp(-fabs(zi)));
            loss_rows[i] += static_cast<float>(alpha * (sp - target * zi));
        }
        if (grad_weights == nullptr) continue;
        const double g = grad_weights[i] * alpha * (1.0 / (1.0 + exp(-zi)) - target);
        dz[i] = static_cast<uint16_t>(f32_to_bf16_bits(static_cast<float>(g)));
        bias += g;
    }
    if (dbias == nullptr) return;  // uniform across the block: no thread skips the reduction alone
    bias = block_sum<kBceThreads>(bias, scratch);
    if (threadIdx.x == 0) dbias[0] += static_cast<float>(bias);
}

}  // namespace

void confidence_bce(const uint16_t* z, const float* tv, const float* weights,
                    const float* grad_weights, float alpha, int64_t rows, float* loss_rows,
                    uint16_t* dz, float* dbias, CUstream_st* stream) {
    if (rows <= 0) return;
    confidence_bce_kernel<<<1, kBceThreads, 0, stream>>>(z, tv, weights, grad_weights, alpha, rows,
                                                         loss_rows, dz, dbias);
    DF_CUDA_CHECK_LAUNCH(confidence_bce_kernel);
}

}  // namespace dflash::cuda::kernels

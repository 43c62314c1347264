// C = beta * C for the GEMM engine's K = 0 case (cuBLASLt is not asked to multiply empty
// matrices). Tested through tests/cuda/gemm_cuda_test.cpp.
#include "backend/cuda/kernels/gemm.h"

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"

namespace dflash::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void scale_kernel(T* c, int64_t n, float beta) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += stride) {
        if constexpr (sizeof(T) == 2) {
            c[i] = __float2bfloat16_rn(beta * __bfloat162float(c[i]));
        } else {
            c[i] = beta * c[i];
        }
    }
}

}  // namespace

void scale_matrix(void* c, bool c_bf16, int64_t n, float beta, CUstream_st* stream) {
    if (n <= 0) return;
    const int64_t want = (n + kThreads - 1) / kThreads;
    const int blocks = static_cast<int>(want < 4096 ? want : 4096);
    if (c_bf16) {
        scale_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(c), n, beta);
        DF_CUDA_CHECK_LAUNCH(scale_kernel<__nv_bfloat16>);
    } else {
        scale_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(c), n, beta);
        DF_CUDA_CHECK_LAUNCH(scale_kernel<float>);
    }
}

}  // namespace dflash::cuda

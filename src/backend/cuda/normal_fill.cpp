// CUDA fill_normal_hash (backend/op_list.h): x f32 or bf16, the numbers of backend/noise_hash.h.
// Tested by tests/cuda/normal_fill_cuda_test.cpp.
#include "backend/cuda/kernels/normal_fill.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"

namespace dflash::cuda {

void fill_normal_hash(const Exec& ex, const Tensor& x, uint64_t seed, float stddev) {
    const char* op = "fill_normal_hash";
    check_device(ex, x, op, "x");
    DF_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16,
             "{}: x is {}, expected f32 or bf16", op, x.describe());
    if (x.empty()) return;
    kernels::fill_normal_hash(x.dtype() == DType::f32 ? static_cast<float*>(x.data()) : nullptr,
                              x.dtype() == DType::bf16 ? static_cast<uint16_t*>(x.data()) : nullptr,
                              x.numel(), seed, stddev, ex.stream);
}

}  // namespace dflash::cuda

// CUDA add_uniform_noise (backend/op_list.h): x f32 or bf16, seed i32 [2] on the device, the
// numbers of backend/noise_hash.h. Tested by tests/cuda/muon_cuda_test.cpp.
#include "backend/cuda/kernels/uniform_noise.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {

void add_uniform_noise(const Exec& ex, const Tensor& x, const Tensor& seed, float amplitude) {
    const char* op = "add_uniform_noise";
    check_device(ex, x, op, "x");
    check_tensor(ex, seed, DType::i32, op, "seed");
    check_uniform_noise_args(x, seed);
    DF_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16,
             "{}: x is {}, expected f32 or bf16", op, x.describe());
    if (x.empty()) return;
    kernels::add_uniform_noise(
        x.dtype() == DType::f32 ? static_cast<float*>(x.data()) : nullptr,
        x.dtype() == DType::bf16 ? static_cast<uint16_t*>(x.data()) : nullptr, x.numel(),
        seed.i32(), amplitude, ex.stream);
}

}  // namespace dflash::cuda

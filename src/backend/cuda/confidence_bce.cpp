// CUDA confidence_bce (backend/op_list.h; the CPU reference is backend/cpu/confidence_bce.cpp):
// z and dz bf16, the rest f32. Tested by tests/cuda/confidence_bce_cuda_test.cpp.
#include "backend/cuda/kernels/confidence_bce.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {

void confidence_bce(const Exec& ex, const Tensor& z, const Tensor& tv, const Tensor& weights,
                    const Tensor& grad_weights, float alpha, const Tensor& loss_rows,
                    const Tensor& dz, const Tensor& dbias) {
    check_tensor(ex, z, DType::bf16, "confidence_bce", "z");
    check_tensor(ex, tv, DType::f32, "confidence_bce", "tv");
    check_tensor(ex, weights, DType::f32, "confidence_bce", "weights");
    check_tensor(ex, grad_weights, DType::f32, "confidence_bce", "grad_weights");
    check_tensor(ex, loss_rows, DType::f32, "confidence_bce", "loss_rows");
    check_tensor(ex, dz, DType::bf16, "confidence_bce", "dz");
    check_tensor(ex, dbias, DType::f32, "confidence_bce", "dbias");
    const int64_t rows =
        check_confidence_bce_args(z, tv, weights, grad_weights, loss_rows, dz, dbias);
    if (rows == 0) return;
    const bool grads = !grad_weights.empty();
    kernels::confidence_bce(static_cast<const uint16_t*>(z.data()), tv.f32(), weights.f32(),
                            grads ? grad_weights.f32() : nullptr, alpha, rows, loss_rows.f32(),
                            grads ? static_cast<uint16_t*>(dz.data()) : nullptr,
                            dbias.empty() ? nullptr : dbias.f32(), ex.stream);
}

}  // namespace dflash::cuda

// CUDA Muon family (backend/op_list.h: muon_momentum, muon_normalize, muon_update): grad,
// momentum, update and master f32; the normalised update and muon_update's x f32 or bf16 (the
// Newton-Schulz iteration runs in the compute dtype, through gemm); value bf16 or empty;
// grad_scale, norm_sq f32 [1] and scalars f32 [2] on the device. Tested by
// tests/cuda/muon_cuda_test.cpp.
#include "backend/cuda/kernels/muon.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

float* fptr(const Tensor& t) {
    return t.empty() ? nullptr : static_cast<float*>(t.data());
}

// An f32-or-bf16 tensor's pointers: exactly one is set.
void f32_or_bf16(const Exec& ex, const Tensor& t, const char* op, const char* name, float*& f,
                 uint16_t*& h) {
    check_device(ex, t, op, name);
    DF_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16,
             "{}: {} is {}, expected f32 or bf16", op, name, t.describe());
    f = t.dtype() == DType::f32 ? static_cast<float*>(t.data()) : nullptr;
    h = t.dtype() == DType::bf16 ? static_cast<uint16_t*>(t.data()) : nullptr;
}

}  // namespace

void muon_momentum(const Exec& ex, const Tensor& grad, const Tensor& grad_scale,
                   const Tensor& momentum, float mu, const Tensor& update) {
    const char* op = "muon_momentum";
    check_tensor(ex, grad, DType::f32, op, "grad");
    check_tensor(ex, grad_scale, DType::f32, op, "grad_scale");
    check_tensor(ex, momentum, DType::f32, op, "momentum");
    check_tensor(ex, update, DType::f32, op, "update");
    const int64_t n = check_muon_momentum_args(grad, grad_scale, momentum, update);
    kernels::muon_momentum(fptr(grad), fptr(grad_scale), fptr(momentum), mu, fptr(update), n,
                           ex.stream);
}

void muon_normalize(const Exec& ex, const Tensor& x, const Tensor& norm_sq, float eps,
                    const Tensor& out) {
    const char* op = "muon_normalize";
    check_tensor(ex, x, DType::f32, op, "x");
    check_tensor(ex, norm_sq, DType::f32, op, "norm_sq");
    const int64_t n = check_muon_normalize_args(x, norm_sq, out);
    float* of = nullptr;
    uint16_t* oh = nullptr;
    f32_or_bf16(ex, out, op, "out", of, oh);
    kernels::muon_normalize(fptr(x), fptr(norm_sq), eps, of, oh, n, ex.stream);
}

void muon_update(const Exec& ex, const Tensor& master, const Tensor& x, const Tensor& scalars,
                 float lr_factor, const Tensor& value) {
    const char* op = "muon_update";
    check_tensor(ex, master, DType::f32, op, "master");
    check_tensor(ex, scalars, DType::f32, op, "scalars");
    check_tensor(ex, value, DType::bf16, op, "value");
    const int64_t n = check_muon_update_args(master, x, scalars, value);
    float* xf = nullptr;
    uint16_t* xh = nullptr;
    f32_or_bf16(ex, x, op, "x", xf, xh);
    kernels::muon_update(fptr(master), xf, xh, fptr(scalars), lr_factor,
                         value.empty() ? nullptr : static_cast<uint16_t*>(value.data()), n,
                         ex.stream);
}

}  // namespace dflash::cuda

// CUDA grouped dynamic causal convolution (backend/op_list.h: dyn_conv_fwd, dyn_conv_bwd): x, base,
// delta, y, dy, dx, ddelta bf16; dbase f32. Tested by tests/cuda/dyn_conv_cuda_test.cpp.
#include "backend/cuda/kernels/dyn_conv.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

const uint16_t* cptr(const Tensor& t) {
    return static_cast<const uint16_t*>(t.data());
}
uint16_t* ptr(const Tensor& t) {
    return static_cast<uint16_t*>(t.data());
}

kernels::DynConvShape shape_of(const DynConvDims& d, int64_t block_size, int64_t half) {
    return kernels::DynConvShape{d.R, d.D, d.k, d.G, d.S, block_size, half};
}

}  // namespace

void dyn_conv_fwd(const Exec& ex, const Tensor& x, const Tensor& base, const Tensor& delta,
                  int64_t half, int64_t block_size, const Tensor& y) {
    constexpr const char* op = "dyn_conv_fwd";
    check_tensor(ex, x, DType::bf16, op, "x");
    check_tensor(ex, base, DType::bf16, op, "base");
    check_tensor(ex, delta, DType::bf16, op, "delta");
    check_tensor(ex, y, DType::bf16, op, "y");
    const DynConvDims d = check_dyn_conv_fwd_shapes(x, base, delta, half, block_size, y);
    kernels::dyn_conv_fwd(cptr(x), cptr(base), cptr(delta), ptr(y), shape_of(d, block_size, half),
                          ex.stream);
}

void dyn_conv_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& base,
                  const Tensor& delta, int64_t half, int64_t block_size, const Tensor& dx,
                  const Tensor& dbase, const Tensor& ddelta) {
    constexpr const char* op = "dyn_conv_bwd";
    check_tensor(ex, dy, DType::bf16, op, "dy");
    check_tensor(ex, x, DType::bf16, op, "x");
    check_tensor(ex, base, DType::bf16, op, "base");
    check_tensor(ex, delta, DType::bf16, op, "delta");
    check_tensor(ex, dx, DType::bf16, op, "dx");
    check_tensor(ex, dbase, DType::f32, op, "dbase");
    check_tensor(ex, ddelta, DType::bf16, op, "ddelta");
    const DynConvDims d =
        check_dyn_conv_bwd_shapes(dy, x, base, delta, half, block_size, dx, dbase, ddelta);
    kernels::dyn_conv_bwd(cptr(dy), cptr(x), cptr(base), cptr(delta), ptr(dx), dbase.f32(),
                          ptr(ddelta), shape_of(d, block_size, half), ex.stream);
}

}  // namespace dflash::cuda

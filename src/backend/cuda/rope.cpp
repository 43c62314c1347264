// CUDA RoPE family (backend/op_list.h: rope_fwd, rope_bwd): x bf16 [S, H, Dh] rotated in place
// (its first 2 * R/2 dims when inv_freq has R/2 < Dh/2 entries: partial rotary), positions i32
// [S] and inv_freq f32 [R/2] on the device. Tested by tests/cuda/rope_cuda_test.cpp.
#include "backend/cuda/kernels/rope.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

void rotate(const Exec& ex, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
            float sign, const char* op) {
    check_tensor(ex, x, DType::bf16, op, "x");
    check_tensor(ex, positions, DType::i32, op, "positions");
    check_tensor(ex, inv_freq, DType::f32, op, "inv_freq");
    check_rope_shapes(x, positions, inv_freq, op);
    const int64_t s_len = x.dim(0);
    const int64_t heads = x.dim(1);
    const int64_t dh = x.dim(2);
    DF_CHECK(heads < (int64_t{1} << 30) && dh < (int64_t{1} << 30),
             "{}: x {} has too many heads or too long a head", op, x.describe());
    if (x.numel() == 0) return;
    kernels::rope(static_cast<uint16_t*>(x.data()), static_cast<const int32_t*>(positions.data()),
                  static_cast<const float*>(inv_freq.data()), s_len, heads, inv_freq.numel(), dh,
                  sign, ex.stream);
}

}  // namespace

void rope_fwd(const Exec& ex, const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
    rotate(ex, x, positions, inv_freq, 1.0f, "rope_fwd");
}

void rope_bwd(const Exec& ex, const Tensor& dx, const Tensor& positions, const Tensor& inv_freq) {
    rotate(ex, dx, positions, inv_freq, -1.0f, "rope_bwd");
}

}  // namespace dflash::cuda

// CUDA RMSNorm family (backend/op_list.h: rmsnorm_fwd, rmsnorm_bwd): x, y, dy, dx bf16 viewed as
// [R, C] with C = w.numel() (hidden norm [S, D] with w [D]; per-head q/k norm [S, H, Dh] with w
// [Dh]), w bf16 (the forward also takes an f32 w: the hybrid families' (1 + w) scales, held in
// f32 by TargetModel so that y is rounded once, as transformers rounds it), rstd f32 [R], dw f32
// [C] accumulated. Tested by tests/cuda/rmsnorm_cuda_test.cpp.
#include "backend/cuda/kernels/rmsnorm.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

// The kernels' widest row (kRmsNormMaxCols): a limit of this backend, not of the op.
void check_row_width(const Tensor& w, const char* op) {
    DF_CHECK(w.numel() <= kernels::kRmsNormMaxCols,
             "{}: rows of {} values; the CUDA kernels normalise rows of at most {}", op, w.numel(),
             kernels::kRmsNormMaxCols);
}

}  // namespace

void rmsnorm_fwd(const Exec& ex, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                 const Tensor& rstd) {
    check_tensor(ex, x, DType::bf16, "rmsnorm_fwd", "x");
    const bool w_f32 = w.dtype() == DType::f32;
    check_tensor(ex, w, w_f32 ? DType::f32 : DType::bf16, "rmsnorm_fwd", "w");
    check_tensor(ex, y, DType::bf16, "rmsnorm_fwd", "y");
    check_tensor(ex, rstd, DType::f32, "rmsnorm_fwd", "rstd");
    const int64_t rows = check_rmsnorm_fwd_shapes(x, w, y, rstd);
    check_row_width(w, "rmsnorm_fwd");
    if (rows == 0) return;
    const auto* px = static_cast<const uint16_t*>(x.data());
    auto* py = static_cast<uint16_t*>(y.data());
    float* pr = rstd.empty() ? nullptr : static_cast<float*>(rstd.data());
    if (w_f32) {
        kernels::rmsnorm_fwd(px, static_cast<const float*>(w.data()), eps, py, pr, rows, w.numel(),
                             ex.pdl, ex.stream);
    } else {
        kernels::rmsnorm_fwd(px, static_cast<const uint16_t*>(w.data()), eps, py, pr, rows,
                             w.numel(), ex.pdl, ex.stream);
    }
}

void rmsnorm_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd, const Tensor& dx, const Tensor& dw) {
    check_tensor(ex, dy, DType::bf16, "rmsnorm_bwd", "dy");
    check_tensor(ex, x, DType::bf16, "rmsnorm_bwd", "x");
    check_tensor(ex, w, DType::bf16, "rmsnorm_bwd", "w");
    check_tensor(ex, rstd, DType::f32, "rmsnorm_bwd", "rstd");
    check_tensor(ex, dx, DType::bf16, "rmsnorm_bwd", "dx");
    check_tensor(ex, dw, DType::f32, "rmsnorm_bwd", "dw");
    const int64_t rows = check_rmsnorm_bwd_shapes(dy, x, w, rstd, dx, dw);
    check_row_width(w, "rmsnorm_bwd");
    if (rows == 0) return;
    const int64_t c = w.numel();
    void* ws = ex.scratch->take(kernels::rmsnorm_bwd_workspace_bytes(rows, c),
                                "rmsnorm_bwd dw partial sums");
    kernels::rmsnorm_bwd(
        static_cast<const uint16_t*>(dy.data()), static_cast<const uint16_t*>(x.data()),
        static_cast<const uint16_t*>(w.data()), static_cast<const float*>(rstd.data()),
        static_cast<uint16_t*>(dx.data()), static_cast<float*>(dw.data()), rows, c, ws, ex.stream);
}

}  // namespace dflash::cuda

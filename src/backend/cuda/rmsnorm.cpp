// CUDA RMSNorm family (backend.h: rmsnorm_fwd, rmsnorm_bwd): x, y, dy, dx bf16 viewed as [R, C]
// with C = w.numel() (hidden norm [S, D] with w [D]; per-head q/k norm [S, H, Dh] with w [Dh]),
// w bf16, rstd f32 [R], dw f32 [C] accumulated. Tested by tests/cuda/rmsnorm_cuda_test.cpp.
#include "backend/cuda/kernels/rmsnorm.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/op_workspace.h"

namespace dflash::cuda {
namespace {

// Returns R, the number of rows of x viewed as [R, C].
int64_t check_rows(const Exec& ex, const Tensor& x, const Tensor& w, const char* op) {
    check_tensor(ex, x, DType::bf16, op, "x");
    check_tensor(ex, w, DType::bf16, op, "w");
    const int64_t c = w.numel();
    DF_CHECK(c > 0 && x.rank() >= 1 && x.dim(-1) == c,
             "{}: x has shape {} but w has {} elements; the norm runs over x's last dim, which "
             "must equal w.numel() (per-head norm: x [S, H, Dh] with w [Dh])",
             op, x.shape().to_string(), c);
    DF_CHECK(c <= kernels::kRmsNormMaxCols,
             "{}: rows of {} values; the CUDA kernels normalise rows of at most {}", op, c,
             kernels::kRmsNormMaxCols);
    return x.numel() / c;
}

void check_rstd(const Exec& ex, const Tensor& rstd, int64_t rows, const char* op) {
    if (rstd.empty()) return;
    check_tensor(ex, rstd, DType::f32, op, "rstd");
    DF_CHECK(rstd.numel() == rows, "{}: rstd has shape {} but x has {} rows of the norm dim", op,
             rstd.shape().to_string(), rows);
}

}  // namespace

void rmsnorm_fwd(const Exec& ex, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                 const Tensor& rstd) {
    const int64_t rows = check_rows(ex, x, w, "rmsnorm_fwd");
    check_tensor(ex, y, DType::bf16, "rmsnorm_fwd", "y");
    check_same_shape(y, x, "rmsnorm_fwd", "y", "x");
    check_rstd(ex, rstd, rows, "rmsnorm_fwd");
    if (rows == 0) return;
    kernels::rmsnorm_fwd(
        static_cast<const uint16_t*>(x.data()), static_cast<const uint16_t*>(w.data()), eps,
        static_cast<uint16_t*>(y.data()), rstd.empty() ? nullptr : static_cast<float*>(rstd.data()),
        rows, w.numel(), ex.stream);
}

void rmsnorm_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd, const Tensor& dx, const Tensor& dw) {
    const int64_t rows = check_rows(ex, x, w, "rmsnorm_bwd");
    check_tensor(ex, dy, DType::bf16, "rmsnorm_bwd", "dy");
    check_tensor(ex, dx, DType::bf16, "rmsnorm_bwd", "dx");
    check_tensor(ex, dw, DType::f32, "rmsnorm_bwd", "dw");
    check_same_shape(dy, x, "rmsnorm_bwd", "dy", "x");
    check_same_shape(dx, x, "rmsnorm_bwd", "dx", "x");
    DF_CHECK(dw.numel() == w.numel(), "rmsnorm_bwd: dw has shape {} but w has {}",
             dw.shape().to_string(), w.shape().to_string());
    DF_CHECK(!rstd.empty() || rows == 0,
             "rmsnorm_bwd: rstd is empty; pass the rstd [{}] that rmsnorm_fwd wrote", rows);
    check_rstd(ex, rstd, rows, "rmsnorm_bwd");
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

// RMSNorm forward/backward over the last dim (hidden norm [S, D] with w [D], and per-head q/k norm
// [S, H, Dh] with w [Dh]), HF semantics: y = w * (x * rsqrt(mean(x^2) + eps)).
// Tested by tests/ops/rmsnorm_test.cpp.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/row_kernels.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

// Columns per work item of the dw reduction.
constexpr int64_t kColBlock = 64;

// 1 / sqrt(mean(x^2) + eps), the mean accumulated in double so long rows lose nothing. Eight
// partial sums (element i goes to i mod 8, row_kernels.h), added in a fixed tree: one running sum
// made every element wait for the previous add (4 cycles each), and this op runs on every row of
// a verify.
float row_rstd(const float* x, int64_t c, float eps) {
    const double ss = row_sum_squares(x, c);
    return static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(c) + eps));
}

}  // namespace

void rmsnorm_fwd(const Exec& ex, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                 const Tensor& rstd) {
    check_cpu_f32(x, "rmsnorm_fwd", "x");
    check_cpu_f32(w, "rmsnorm_fwd", "w");
    check_cpu_f32(y, "rmsnorm_fwd", "y");
    if (!rstd.empty()) check_cpu_f32(rstd, "rmsnorm_fwd", "rstd");
    const int64_t rows = check_rmsnorm_fwd_shapes(x, w, y, rstd);
    const int64_t c = w.numel();
    const float* px = x.f32();
    const float* pw = w.f32();
    float* py = y.f32();
    float* pr = rstd.empty() ? nullptr : rstd.f32();
    parallel_for(ex, rows, rows * c > 16384, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* xr = px + r * c;
            float* yr = py + r * c;
            const float s = row_rstd(xr, c, eps);
            // HF order: normalise first, then scale by the weight.
            row_scale_weighted(pw, xr, s, yr, c);
            if (pr) pr[r] = s;
        }
    });
}

// With r = rstd and y_i = w_i x_i r:  dx_j = r * (w_j dy_j - x_j r^2 / C * sum_i dy_i w_i x_i),
// dw_i += sum_rows dy_i x_i r.
void rmsnorm_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd, const Tensor& dx, const Tensor& dw) {
    check_cpu_f32(dy, "rmsnorm_bwd", "dy");
    check_cpu_f32(x, "rmsnorm_bwd", "x");
    check_cpu_f32(w, "rmsnorm_bwd", "w");
    check_cpu_f32(dx, "rmsnorm_bwd", "dx");
    check_cpu_f32(dw, "rmsnorm_bwd", "dw");
    if (!rstd.empty()) check_cpu_f32(rstd, "rmsnorm_bwd", "rstd");
    const int64_t rows = check_rmsnorm_bwd_shapes(dy, x, w, rstd, dx, dw);
    const int64_t c = w.numel();
    const float* pdy = dy.f32();
    const float* px = x.f32();
    const float* pw = w.f32();
    const float* pr = rows == 0 ? nullptr : rstd.f32();
    float* pdx = dx.f32();
    float* pdw = dw.f32();
    const double inv_c = 1.0 / static_cast<double>(c);
    const bool parallel = rows * c > 16384;
    parallel_for(ex, rows, parallel, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* dyr = pdy + r * c;
            const float* xr = px + r * c;
            float* dxr = pdx + r * c;
            double dot = 0;
            for (int64_t i = 0; i < c; ++i) dot += static_cast<double>(dyr[i]) * pw[i] * xr[i];
            const double s = pr[r];
            const float coef = static_cast<float>(s * s * dot * inv_c);
            const float sf = pr[r];
            for (int64_t i = 0; i < c; ++i) dxr[i] = sf * (pw[i] * dyr[i] - xr[i] * coef);
        }
    });
    // dw sums over rows: each column block is owned by one thread and summed in row order.
    const int64_t blocks = (c + kColBlock - 1) / kColBlock;
    parallel_for(ex, blocks, parallel, [&](int64_t b0, int64_t b1) {
        for (int64_t blk = b0; blk < b1; ++blk) {
            const int64_t c0 = blk * kColBlock;
            const int64_t c1 = std::min(c, c0 + kColBlock);
            double acc[kColBlock] = {};
            for (int64_t r = 0; r < rows; ++r) {
                const float* dyr = pdy + r * c;
                const float* xr = px + r * c;
                const double s = pr[r];
                for (int64_t i = c0; i < c1; ++i)
                    acc[i - c0] += static_cast<double>(dyr[i]) * xr[i] * s;
            }
            for (int64_t i = c0; i < c1; ++i) pdw[i] += static_cast<float>(acc[i - c0]);
        }
    });
}

}  // namespace dflash::cpu

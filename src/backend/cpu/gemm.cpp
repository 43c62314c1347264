// GEMM through BLAS (OpenBLAS cblas_sgemm): C = alpha * op(A) · op(B) + beta * C on row-major fp32.
// Tested by tests/ops/gemm_test.cpp.
#include <cblas.h>

#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {
namespace {

// A matrix operand: tensors of rank >= 2 are viewed as [numel / last, last], so activations such as
// [S, H, Dh] can be passed without a reshape.
struct Mat {
    int64_t rows = 0;
    int64_t cols = 0;
};

Mat as_matrix(const Tensor& t, const char* name) {
    DF_CHECK(t.dtype() == DType::f32, "gemm: {} is {} but the CPU gemm takes f32", name,
             t.describe());
    DF_CHECK(t.device().kind == DeviceKind::cpu, "gemm: {} is {}, expected a CPU tensor", name,
             t.describe());
    DF_CHECK(t.rank() >= 2, "gemm: {} has shape {}; expected a matrix (rank >= 2)", name,
             t.shape().to_string());
    const int64_t cols = t.dim(-1);
    return {cols == 0 ? 0 : t.numel() / cols, cols};
}

}  // namespace

void gemm(const Exec&, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
          const Tensor& c, float alpha, float beta) {
    const Mat ma = as_matrix(a, "A");
    const Mat mb = as_matrix(b, "B");
    const Mat mc = as_matrix(c, "C");
    const int64_t m = trans_a ? ma.cols : ma.rows;
    const int64_t k = trans_a ? ma.rows : ma.cols;
    const int64_t kb = trans_b ? mb.cols : mb.rows;
    const int64_t n = trans_b ? mb.rows : mb.cols;
    DF_CHECK(k == kb,
             "gemm: inner dimensions differ: op(A) is [{}, {}] (A {}{}) but op(B) is [{}, {}] "
             "(B {}{}); a linear layer with weight W [out, in] is gemm(x, false, W, true, y)",
             m, k, a.shape().to_string(), trans_a ? "ᵀ" : "", kb, n, b.shape().to_string(),
             trans_b ? "ᵀ" : "");
    DF_CHECK(mc.rows == m && mc.cols == n,
             "gemm: C has shape {} (as [{}, {}]) but op(A)·op(B) is [{}, {}] (A {}{}, B {}{})",
             c.shape().to_string(), mc.rows, mc.cols, m, n, a.shape().to_string(),
             trans_a ? "ᵀ" : "", b.shape().to_string(), trans_b ? "ᵀ" : "");
    DF_CHECK(m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX,
             "gemm: [{}, {}] x [{}, {}] exceeds the 32-bit BLAS interface", m, k, k, n);
    if (m == 0 || n == 0) return;
    if (k == 0) {
        // BLAS rejects a zero leading dimension; op(A)·op(B) is the zero matrix.
        float* pc = c.f32();
        for (int64_t i = 0; i < m * n; ++i) pc[i] = beta == 0.0f ? 0.0f : beta * pc[i];
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), alpha, a.f32(), static_cast<int>(ma.cols), b.f32(),
                static_cast<int>(mb.cols), beta, c.f32(), static_cast<int>(n));
}

void set_blas_threads(int threads) {
    openblas_set_num_threads(threads < 1 ? 1 : threads);
}

}  // namespace dflash::cpu

// GEMM through BLAS (OpenBLAS cblas_sgemm): C = alpha * op(A) · op(B) + beta * C on row-major fp32.
// Tested by tests/ops/gemm_test.cpp.
#include <cblas.h>

#include <algorithm>

#include "backend/cpu/cpu_ops.h"

// OpenBLAS's own entry point (not in cblas.h): stops its thread server.
extern "C" int blas_thread_shutdown_(void);

namespace dflash::cpu {
namespace {

// Note [gemm determinism]
// OpenBLAS's own threading changes the bits of the result with its thread count (measured with
// 0.3.21: 131x97x113 differs between 1 and 3 threads in ~3500 of 14803 outputs: how the threads
// partition C changes how an element is computed). So OpenBLAS should run
// single-threaded (set_blas_threads(1) at start-up) and gemm parallelises itself over fixed tiles
// of C with OpenMP: results are then bitwise identical for any ex.threads. Tiles are large enough
// that re-packing the shared operand per tile costs < 1% of the multiply.
constexpr int64_t kTileM = 128;
constexpr int64_t kTileN = 512;

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
    int64_t rows = 1;
    for (int i = 0; i + 1 < t.rank(); ++i) rows *= t.dim(i);
    return {rows, t.dim(-1)};
}

}  // namespace

void gemm(const Exec& ex, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
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
    // Fixed tiles of C, each one single-threaded sgemm call: the tiling depends only on the shape,
    // so every element is computed by the same call whatever ex.threads is (see Note [gemm
    // determinism]).
    const int64_t tiles_m = (m + kTileM - 1) / kTileM;
    const int64_t tiles_n = (n + kTileN - 1) / kTileN;
    const int64_t tiles = tiles_m * tiles_n;
    const float* pa = a.f32();
    const float* pb = b.f32();
    float* pc = c.f32();
    const int64_t lda = ma.cols, ldb = mb.cols;
#pragma omp parallel for schedule(static) num_threads(ex.threads) if (tiles > 1 && ex.threads > 1)
    for (int64_t t = 0; t < tiles; ++t) {
        const int64_t i0 = (t / tiles_n) * kTileM, j0 = (t % tiles_n) * kTileN;
        const int64_t mt = std::min(kTileM, m - i0), nt = std::min(kTileN, n - j0);
        // op(A) rows i0.. are stored rows (no transpose) or stored columns (transpose).
        const float* at = trans_a ? pa + i0 : pa + i0 * lda;
        const float* bt = trans_b ? pb + j0 * ldb : pb + j0;
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, static_cast<int>(mt), static_cast<int>(nt),
                    static_cast<int>(k), alpha, at, static_cast<int>(lda), bt,
                    static_cast<int>(ldb), beta, pc + i0 * n + j0, static_cast<int>(n));
    }
}

// Threads OpenBLAS may use inside one sgemm call. 1 is what gemm expects (see Note [gemm
// determinism]); more makes results depend on this count and oversubscribes ex.threads.
void set_blas_threads(int threads) {
    openblas_set_num_threads(threads < 1 ? 1 : threads);
}

void stop_blas_threads() {
    blas_thread_shutdown_();
}

}  // namespace dflash::cpu

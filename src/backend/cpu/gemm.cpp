// GEMM: C = alpha * op(A) · op(B) + beta * C on row-major fp32, with the kernels of sgemm.h split
// over the backend's threads. Tested by tests/ops/gemm_test.cpp.
#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/sgemm.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

// Note [gemm determinism]
// Every element of C is computed by the same instructions whichever tile or thread computes it
// (Note [sgemm]), so C can be split over threads in any way: results are bitwise identical for
// any thread count. (OpenBLAS, used before, changed the bits of a 131x97x113 product between 1
// and 3 threads in ~3500 of 14803 outputs.) Splits are aligned to the kernels' tiles so no thread
// gets a ragged edge it need not have.
constexpr int64_t kRowAlign = 24;  // a multiple of every kernel's row tile (8, 6, 4)
constexpr int64_t kColAlign = 64;  // a multiple of every kernel's column tile (3 rows: any; 64)

// Part p of `parts` of [0, n), aligned to `align`.
int64_t split(int64_t n, int64_t parts, int64_t p, int64_t align) {
    const int64_t units = (n + align - 1) / align;
    return std::min(n, units * p / parts * align);
}

}  // namespace
void gemm(const Exec& ex, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
          const Tensor& c, float alpha, float beta) {
    check_cpu_f32(a, "gemm", "A");
    check_cpu_f32(b, "gemm", "B");
    check_cpu_f32(c, "gemm", "C");
    const auto [m, n, k] = check_gemm_shapes(a, trans_a, b, trans_b, c);
    if (m == 0 || n == 0) return;
    if (k == 0) {
        // op(A)·op(B) is the zero matrix.
        float* pc = c.f32();
        for (int64_t i = 0; i < m * n; ++i) pc[i] = beta == 0.0f ? 0.0f : beta * pc[i];
        return;
    }
    const MatrixRef ra{a.f32(), a.dim(-1), trans_a}, rb{b.f32(), b.dim(-1), trans_b};
    float* pc = c.f32();
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * k;
    const int threads = flops >= kParallelFlops ? ex.threads() : 1;
    const bool by_rows = m >= threads * kRowAlign;
    const int64_t parts = by_rows ? std::min<int64_t>(threads, (m + kRowAlign - 1) / kRowAlign)
                                  : std::min<int64_t>(threads, (n + kColAlign - 1) / kColAlign);
    parallel_for(ex, parts, parts > 1, [&](int64_t p0, int64_t p1) {
        for (int64_t p = p0; p < p1; ++p) {
            if (by_rows) {
                const int64_t i0 = split(m, parts, p, kRowAlign),
                              i1 = split(m, parts, p + 1, kRowAlign);
                const MatrixRef at{trans_a ? ra.p + i0 : ra.p + i0 * ra.ld, ra.ld, trans_a};
                sgemm(i1 - i0, n, k, alpha, at, rb, beta, pc + i0 * n, n, m);
            } else {
                const int64_t j0 = split(n, parts, p, kColAlign),
                              j1 = split(n, parts, p + 1, kColAlign);
                const MatrixRef bt{trans_b ? rb.p + j0 * rb.ld : rb.p + j0, rb.ld, trans_b};
                sgemm(m, j1 - j0, k, alpha, ra, bt, beta, pc + j0, n);
            }
        }
    });
}

}  // namespace dflash::cpu

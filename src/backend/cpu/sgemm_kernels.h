// The sgemm kernels, written once over a vector type V (Note [sgemm] in sgemm.h). Included only
// by sgemm_avx512.cpp and sgemm_avx2.cpp, after their `#pragma GCC target`, so each includes a
// copy compiled for its instruction set; everything here has internal linkage so the two copies
// never meet at link time. V provides: W (lanes), kDotRows/kDotCols and kAxpyRows/kAxpyVecs
// (tile sizes), zero, load, load_n (lanes >= n read as 0), store_n, set1, fma, mul, add, sum
// (fixed order), transpose (a W x W block in W registers) and, where kSum4, store_sums4 (C[0..3] =
// alpha * the sums of four accumulators, each by the tree of sum, + beta * C). Tested by
// tests/ops/sgemm_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/sgemm.h"

namespace dflash::cpu {
namespace {

// Bytes of the operand kept in L2 across tiles (rows of B for NT, rows of A for NN/TN).
constexpr int64_t kBlockBytes = 256 * 1024;

// ---- NT: C[i, j] = alpha * dot(A row i, B row j) + beta * C[i, j]
// --------------------------------

// Where a tile prefetches the rows of B two tiles on: into L1, into L2 only, or not at all.
// Measured on the 2-core Xeon (docs/performance.md, "verify and draft per op"): with K = 768 the
// lines two tiles on (24 KB) evicted the 8-row A block and the current tile from L1, so an 8-row
// product cost 1.9x a 1-row one instead of 1.5x; into L2 they arrive as early and evict nothing.
// Row tiles after the first read the B tile the first one already fetched, so they do not prefetch.
enum class Prefetch { l1, l2, none };

template <typename V, int MR, int NR, bool Tail, Prefetch P>
__attribute__((always_inline)) inline void dot_step(const float* a, int64_t lda, const float* b,
                                                    int64_t ldb, int n,
                                                    typename V::T (&acc)[MR][NR]) {
    typename V::T bv[NR];
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
        bv[j] = Tail ? V::load_n(b + j * ldb, n) : V::load(b + j * ldb);
        // The rows of B two tiles on (a prefetch never faults, past the end of B included).
        if constexpr (P == Prefetch::l1) __builtin_prefetch(b + (2 * NR + j) * ldb, 0, 3);
        if constexpr (P == Prefetch::l2) __builtin_prefetch(b + (2 * NR + j) * ldb, 0, 2);
    }
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
        const typename V::T av = Tail ? V::load_n(a + i * lda, n) : V::load(a + i * lda);
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i][j] = V::fma(av, bv[j], acc[i][j]);
    }
}

template <typename V, int MR, int NR, Prefetch P>
void dot_tile(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float alpha,
              float beta, float* c, int64_t ldc) {
    typename V::T acc[MR][NR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int j = 0; j < NR; ++j) acc[i][j] = V::zero();
    int64_t kk = 0;
    for (; kk + V::W <= k; kk += V::W)
        dot_step<V, MR, NR, false, P>(a + kk, lda, b + kk, ldb, 0, acc);
    if (kk < k)
        dot_step<V, MR, NR, true, P>(a + kk, lda, b + kk, ldb, static_cast<int>(k - kk), acc);
    for (int i = 0; i < MR; ++i) {
        if constexpr (NR == 4 && V::kSum4) {  // four sums at once, the same tree as V::sum
            V::store_sums4(acc[i], alpha, beta, c + i * ldc);
            continue;
        }
        for (int j = 0; j < NR; ++j) {
            float r = alpha * V::sum(acc[i][j]);
            if (beta != 0.0f) r = r + beta * c[i * ldc + j];
            c[i * ldc + j] = r;
        }
    }
}

// A tile of mr <= MR rows and nr <= NR columns.
template <typename V, int MR, int NR, Prefetch P>
void dot_tile_any(int mr, int nr, int64_t k, const float* a, int64_t lda, const float* b,
                  int64_t ldb, float alpha, float beta, float* c, int64_t ldc) {
    if constexpr (MR > 1) {
        if (mr < MR)
            return dot_tile_any<V, MR - 1, NR, P>(mr, nr, k, a, lda, b, ldb, alpha, beta, c, ldc);
    }
    if constexpr (NR > 1) {
        if (nr < NR)
            return dot_tile_any<V, MR, NR - 1, P>(mr, nr, k, a, lda, b, ldb, alpha, beta, c, ldc);
    }
    dot_tile<V, MR, NR, P>(k, a, lda, b, ldb, alpha, beta, c, ldc);
}

// Each tile of B rows is used by every row tile of A while it is in L1 (this path has fewer
// than kSgemmPackRows rows, so A stays in L1/L2 throughout).
template <typename V>
void dot_gemm(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b, float beta,
              float* c, int64_t ldc) {
    constexpr int MR = V::kDotRows, NR = V::kDotCols;
    // The lines two tiles of B on (Prefetch): into L1 while they fit beside A and the tile.
    const bool far = 2 * NR * k * static_cast<int64_t>(sizeof(float)) > 16 * 1024;
    for (int64_t j = 0; j < n; j += NR) {
        const int nr = static_cast<int>(std::min<int64_t>(NR, n - j));
        for (int64_t i = 0; i < m; i += MR) {
            const int mr = static_cast<int>(std::min<int64_t>(MR, m - i));
            const float* ai = a.p + i * a.ld;
            const float* bj = b.p + j * b.ld;
            float* cij = c + i * ldc + j;
            if (i > 0) {
                dot_tile_any<V, MR, NR, Prefetch::none>(mr, nr, k, ai, a.ld, bj, b.ld, alpha, beta,
                                                        cij, ldc);
            } else if (far) {
                dot_tile_any<V, MR, NR, Prefetch::l2>(mr, nr, k, ai, a.ld, bj, b.ld, alpha, beta,
                                                      cij, ldc);
            } else {
                dot_tile_any<V, MR, NR, Prefetch::l1>(mr, nr, k, ai, a.ld, bj, b.ld, alpha, beta,
                                                      cij, ldc);
            }
        }
    }
}

// ---- NN / TN: C[i, j:j+W] = alpha * sum_k A(i, k) * B[k, j:j+W] + beta * C ---------------------

// A(i, k) = a[i * a_row + k * a_col].
struct AxpyA {
    const float* a;
    int64_t a_row, a_col;
};

template <typename V, int MR, int NV, bool Partial>
void axpy_tile(int64_t k, AxpyA a, const float* b, int64_t ldb, int last, float alpha, float beta,
               float* c, int64_t ldc) {
    typename V::T acc[MR][NV];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
    for (int64_t kk = 0; kk < k; ++kk) {
        const float* bk = b + kk * ldb;
        typename V::T bv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            bv[v] =
                (Partial && v == NV - 1) ? V::load_n(bk + v * V::W, last) : V::load(bk + v * V::W);
        }
        const float* ak = a.a + kk * a.a_col;
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const typename V::T av = V::set1(ak[i * a.a_row]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(av, bv[v], acc[i][v]);
        }
    }
    const typename V::T va = V::set1(alpha), vb = V::set1(beta);
    for (int i = 0; i < MR; ++i) {
        for (int v = 0; v < NV; ++v) {
            float* cp = c + i * ldc + v * V::W;
            const int n = (Partial && v == NV - 1) ? last : V::W;
            typename V::T r = V::mul(va, acc[i][v]);
            if (beta != 0.0f) r = V::add(r, V::mul(vb, V::load_n(cp, n)));
            V::store_n(cp, r, n);
        }
    }
}

// A tile of mr <= MR rows and nv <= NV vectors, the last holding `last` columns.
template <typename V, int MR, int NV>
void axpy_tile_any(int mr, int nv, int last, int64_t k, AxpyA a, const float* b, int64_t ldb,
                   float alpha, float beta, float* c, int64_t ldc) {
    if constexpr (MR > 1) {
        if (mr < MR)
            return axpy_tile_any<V, MR - 1, NV>(mr, nv, last, k, a, b, ldb, alpha, beta, c, ldc);
    }
    if constexpr (NV > 1) {
        if (nv < NV)
            return axpy_tile_any<V, MR, NV - 1>(mr, nv, last, k, a, b, ldb, alpha, beta, c, ldc);
    }
    if (last == V::W) return axpy_tile<V, MR, NV, false>(k, a, b, ldb, last, alpha, beta, c, ldc);
    axpy_tile<V, MR, NV, true>(k, a, b, ldb, last, alpha, beta, c, ldc);
}

template <typename V>
void axpy_gemm(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b, float beta,
               float* c, int64_t ldc) {
    constexpr int MR = V::kAxpyRows, NV = V::kAxpyVecs;
    constexpr int64_t NC = int64_t{NV} * V::W;
    const int64_t a_row = a.trans ? 1 : a.ld, a_col = a.trans ? a.ld : 1;
    const int64_t mb = std::max<int64_t>(MR, kBlockBytes / (4 * k) / MR * MR);  // rows of A
    for (int64_t i0 = 0; i0 < m; i0 += mb) {
        const int64_t i1 = std::min(m, i0 + mb);
        for (int64_t j = 0; j < n; j += NC) {
            const int64_t cols = std::min(NC, n - j);
            const int nv = static_cast<int>((cols + V::W - 1) / V::W);
            const int last = static_cast<int>(cols - int64_t{nv - 1} * V::W);
            for (int64_t i = i0; i < i1; i += MR) {
                axpy_tile_any<V, MR, NV>(static_cast<int>(std::min<int64_t>(MR, i1 - i)), nv, last,
                                         k, AxpyA{a.p + i * a_row, a_row, a_col}, b.p + j, b.ld,
                                         alpha, beta, c + i * ldc + j, ldc);
            }
        }
    }
}

// panel[kk * NC + jj] = element kk of B row j + jj, for jj < cols: W x W blocks transposed in
// registers (V::transpose), the ragged edges one element at a time. Element by element this was
// a tenth of a pretraining step (perf, docs/performance.md "verify and draft per op").
template <typename V>
void pack_panel(MatrixRef b, int64_t j, int64_t cols, int64_t k, float* panel) {
    constexpr int64_t NC = int64_t{V::kAxpyVecs} * V::W, W = V::W;
    const int64_t full_cols = cols / W * W, full_k = k / W * W;
    for (int64_t k0 = 0; k0 < full_k; k0 += W) {
        for (int64_t c0 = 0; c0 < full_cols; c0 += W) {
            typename V::T r[W];
#pragma GCC unroll 16
            for (int t = 0; t < W; ++t) r[t] = V::load(b.p + (j + c0 + t) * b.ld + k0);
            V::transpose(r);
#pragma GCC unroll 16
            for (int t = 0; t < W; ++t) V::store_n(panel + (k0 + t) * NC + c0, r[t], W);
        }
    }
    for (int64_t jj = 0; jj < cols; ++jj) {
        const float* row = b.p + (j + jj) * b.ld;
        for (int64_t kk = jj < full_cols ? full_k : 0; kk < k; ++kk) panel[kk * NC + jj] = row[kk];
    }
}

// NT with many rows: B's rows are transposed, NC at a time, into a [K, NC] panel, and the NN
// kernels run on it (the dot kernels' per-element lane reduction costs more than the copy).
template <typename V>
void packed_nt_gemm(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b,
                    float beta, float* c, int64_t ldc) {
    constexpr int64_t NC = int64_t{V::kAxpyVecs} * V::W;
    std::vector<float> panel(static_cast<size_t>(k * NC));
    for (int64_t j = 0; j < n; j += NC) {
        const int64_t cols = std::min(NC, n - j);
        pack_panel<V>(b, j, cols, k, panel.data());
        axpy_gemm<V>(m, cols, k, alpha, a, MatrixRef{panel.data(), NC, false}, beta, c + j, ldc);
    }
}

// ---- NT on a prepared copy of B: panels of Bᵀ (panel_gemm, f32_panels.h) ---------------------

// C[i, j0 + v * W + l] (+)= a chain of FMAs over k in order, A(i, k) broadcast times the panel's
// row k (its NV vectors): the arithmetic of axpy_tile with alpha = 1, so the bits of the packed
// NT path, for any M. One pass over the panel per MR rows.
template <typename V, int MR, int NV>
void panel_tile(int64_t k, const float* a, int64_t lda, const float* panel, int cols, float beta,
                float* c, int64_t ldc) {
    constexpr int NC = NV * V::W;
    typename V::T acc[MR][NV];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) acc[i][v] = V::zero();
    for (int64_t kk = 0; kk < k; ++kk) {
        typename V::T bv[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            bv[v] = V::load(panel + kk * NC + v * V::W);
            // The panel's row 32 on (6 KB for AVX-512; a prefetch never faults): in `dflash
            // bench` on the Zen 5 box an 8-row verify fell from 2.08x to 1.77x a decode with it
            // (16 rows on: 1.82x, 64: 1.77x; docs/performance.md).
            __builtin_prefetch(panel + (kk + 32) * NC + v * V::W, 0, 3);
        }
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const typename V::T av = V::set1(a[i * lda + kk]);
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) acc[i][v] = V::fma(av, bv[v], acc[i][v]);
        }
    }
    const typename V::T vb = V::set1(beta);
    for (int i = 0; i < MR; ++i) {
        for (int v = 0; v < NV; ++v) {
            const int n = std::min(V::W, cols - v * V::W);
            if (n <= 0) break;
            float* cp = c + i * ldc + v * V::W;
            typename V::T r = acc[i][v];
            if (beta != 0.0f) r = V::add(r, V::mul(vb, V::load_n(cp, n)));
            V::store_n(cp, r, n);
        }
    }
}

template <typename V, int MR, int NV>
void panel_tile_any(int mr, int64_t k, const float* a, int64_t lda, const float* panel, int cols,
                    float beta, float* c, int64_t ldc) {
    if constexpr (MR > 1) {
        if (mr < MR) return panel_tile_any<V, MR - 1, NV>(mr, k, a, lda, panel, cols, beta, c, ldc);
    }
    panel_tile<V, MR, NV>(k, a, lda, panel, cols, beta, c, ldc);
}

// C [m, n] = A [m, k] · Bᵀ + beta * C for the panels [p0, p1) of B's copy (each [k, NC], columns
// past n zero).
template <typename V>
void panel_gemm(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* panels,
                int64_t p0, int64_t p1, float beta, float* c, int64_t ldc) {
    constexpr int MR = V::kPanelRows, NV = V::kPanelVecs, NC = NV * V::W;
    for (int64_t p = p0; p < p1; ++p) {
        const int cols = static_cast<int>(std::min<int64_t>(NC, n - p * NC));
        for (int64_t i = 0; i < m; i += MR) {
            panel_tile_any<V, MR, NV>(static_cast<int>(std::min<int64_t>(MR, m - i)), k,
                                      a + i * lda, lda, panels + p * k * NC, cols, beta,
                                      c + i * ldc + p * NC, ldc);
        }
    }
}

template <typename V>
void sgemm_impl(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b, float beta,
                float* c, int64_t ldc, bool packed) {
    if (m <= 0 || n <= 0 || k <= 0 || (a.trans && b.trans)) {
        sgemm_portable(m, n, k, alpha, a, b, beta, c, ldc);  // edge cases and TT (unused)
    } else if (b.trans && packed) {
        packed_nt_gemm<V>(m, n, k, alpha, a, b, beta, c, ldc);
    } else if (b.trans) {
        dot_gemm<V>(m, n, k, alpha, a, b, beta, c, ldc);
    } else {
        axpy_gemm<V>(m, n, k, alpha, a, b, beta, c, ldc);
    }
}

}  // namespace
}  // namespace dflash::cpu

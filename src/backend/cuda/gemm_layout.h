// How a row-major GEMM C[m, n] = op(A) · op(B) is expressed in cuBLASLt's column-major terms, and
// the pointer alignment the algorithm search is told about. Plain C++ (no CUDA headers) so the
// mapping is tested on the CPU: tests/ops/gemm_layout_test.cpp runs a column-major reference GEMM
// through it for every transpose combination.
//
// A row-major matrix X [r, c] is, read column-major, the matrix Xᵀ [c, r] with leading dimension c.
// So the row-major C [m, n] is the column-major Cᵀ [n, m], and Cᵀ = op(B)ᵀ · op(A)ᵀ: cuBLASLt's
// first operand is our B (stored [n, k] or [k, n]), its second our A, with the same transpose
// flags (op(B)ᵀ is the stored column-major matrix itself when B is not transposed).
#pragma once

#include <cstdint>

namespace dflash::cuda {

// One cuBLASLt matrix layout: rows, cols and leading dimension of the stored column-major matrix,
// and whether the matmul transposes it.
struct LtOperand {
    int64_t rows = 0;
    int64_t cols = 0;
    int64_t ld = 0;
    bool trans = false;
};

struct LtGemm {
    LtOperand a;  // cuBLASLt's A: our B
    LtOperand b;  // cuBLASLt's B: our A
    LtOperand c;  // cuBLASLt's C and D: our C, column-major [n, m]
};

// Row-major op(A) [m, k], op(B) [k, n], C [m, n]; A stored [m, k] (or [k, m] when trans_a), B
// stored [k, n] (or [n, k] when trans_b).
inline LtGemm lt_gemm_for_row_major(int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b) {
    LtGemm g;
    // Our B stored row-major [rows_b, cols_b] is column-major [cols_b, rows_b].
    const int64_t rows_b = trans_b ? n : k, cols_b = trans_b ? k : n;
    g.a = {cols_b, rows_b, cols_b, trans_b};
    const int64_t rows_a = trans_a ? k : m, cols_a = trans_a ? m : k;
    g.b = {cols_a, rows_a, cols_a, trans_a};
    g.c = {n, m, n, false};
    return g;
}

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing `address`:
// row views (Tensor::rows) of a 256-byte aligned allocation may be aligned to as little as the
// element size, and an algorithm chosen for 256-byte alignment must not be run on them.
inline uint32_t pointer_alignment(uintptr_t address) {
    uint32_t align = 256;
    while (align > 1 && address % align != 0) align /= 2;
    return align;
}

// log2 of an alignment (0..8): packs three alignments into the plan key.
inline int alignment_log2(uint32_t align) {
    int l = 0;
    while ((1u << l) < align) ++l;
    return l;
}

}  // namespace dflash::cuda

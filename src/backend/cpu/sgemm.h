// sgemm: single-threaded fp32 matrix multiply kernels of our own, used by every CPU op that
// multiplies matrices (gemm, attention, lm_head_ce). Tested by tests/ops/sgemm_test.cpp.
//
// Note [sgemm]: why not BLAS. The build targets plain x86-64, so only a runtime-dispatched
// library or kernel uses the vector units; Debian's OpenBLAS 0.3.21 picks its SSE3 (Prescott)
// kernels on CPUs its table does not know (the 2-core Xeon of issue 9), re-packs the weight on
// every call (27% of a decode in sgemm_incopy) and keeps a process-wide thread count and server
// threads. These kernels read both operands in place (no packing) and pick AVX-512, AVX2+FMA or
// portable code once per process from the CPU's feature bits (docs/performance.md has the
// measurements). Shapes: op(A) [M, K], op(B) [K, N], C [M, N], all row-major with leading
// dimensions; the transformer's shapes are "NT" (x · Wᵀ: dot products of two contiguous rows),
// "NN" and "TN" (rows of B scaled and added: the backward products).
//
// Two ways to compute an element: an NT product of fewer than kSgemmPackRows rows (decode,
// verify, draft) takes dot products whose partial sums sit in fixed vector lanes (k mod width),
// added in a fixed tree at the end; NN, TN and larger NT products (the NT ones on panels of B
// transposed per call) run one fused multiply-add chain per element over k in order.
//
// Determinism: either way, every element of C is computed by the same instruction sequence
// whatever N, the tile it falls in and the thread that runs it, and (below kSgemmPackRows) M. So
// a row of an 8-token verify equals the 1-token decode of the same input bit for bit, and any
// split of C over threads gives the same bits, provided a caller that splits C by rows picks
// the way on the whole M (`plan_rows`). Accumulation is fp32, as in BLAS.
#pragma once

#include <cstdint>

#include "backend/cpu/isa.h"

namespace dflash::cpu {

// One operand: element (r, c) of op(X) is p[r * ld + c], or p[c * ld + r] when trans.
struct MatrixRef {
    const float* p = nullptr;
    int64_t ld = 0;
    bool trans = false;
};

// NT products with at least this many rows transpose B in panels (see above).
constexpr int64_t kSgemmPackRows = 32;

// C[m, n] = alpha * op(A)[m, k] · op(B)[k, n] + beta * C (C is not read when beta == 0), with the
// detected kernels; single-threaded (callers split C over threads). plan_rows: the M that picks
// the way for NT (the whole product's M when this call computes some of its rows; 0: m).
void sgemm(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b, float beta,
           float* c, int64_t ldc, int64_t plan_rows = 0);
// The same with the given kernels (tests run every family the CPU supports).
void sgemm_with(CpuIsa isa, int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b,
                float beta, float* c, int64_t ldc, int64_t plan_rows = 0);

// Per-family entry points (sgemm_avx512.cpp, sgemm_avx2.cpp, sgemm.cpp); `packed`: NT on
// transposed panels of B.
void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b,
                  float beta, float* c, int64_t ldc, bool packed);
void sgemm_avx2(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b, float beta,
                float* c, int64_t ldc, bool packed);
void sgemm_portable(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b,
                    float beta, float* c, int64_t ldc);

}  // namespace dflash::cpu

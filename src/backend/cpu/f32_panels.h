// A linear layer's fp32 weight copied once into panels of Wᵀ, for the products of a few rows that
// decoding runs on every step (the target's decode and verify). Tested by
// tests/ops/f32_panels_test.cpp.
//
// Note [f32 panels]. Why: the dot kernels (Note [sgemm]) compute an element as 16 lane sums over k
// mod 16 added by a tree, and reach every output's row of W in place. On the 2-core AMD EPYC of
// issue 27 (Zen 5) an 8-row verify's products cost 2.15-2.32x a 1-row decode's that way: the
// second 4-row tile re-reads the first one's tile of W from L1 after the stream, so the weight
// stream and the FMAs do not overlap (docs/performance.md, "CPU: a 2-core AMD EPYC without AMX").
// In a panel, row k holds element k of NC consecutive outputs, so an output sits in a vector
// lane: A(i, k) is broadcast and multiplied into NC outputs' sums, 8 rows at once (24 of the 32
// AVX-512 registers), in one pass over the panel, with no lane sums. Transposing W on every call
// instead cost a decode 2-3x (measured); hence a copy, made once, that holds W's values as they
// were then (PreparedWeights: whoever changes W makes a new one).
//
// The bits. Every element is one chain of fused multiply-adds over k in order, from zero, then
// + beta * C: the arithmetic of sgemm's packed NT path (Note [sgemm]), whatever M, the tile, the
// panel width, the instruction set (AVX-512 or AVX2) or the thread that computes it. So a verify
// row equals the decode of the same input bit for bit, and both equal a product of 32 rows or
// more through gemm; they differ in the last bits from gemm's dot kernels (fewer than 32 rows),
// so every step of one decoding must multiply through the same copies.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/isa.h"

namespace dflash::cpu {

// W [n, k] as ceil(n / nc) panels, each [k][nc] row-major (columns past n zero), nc the
// instruction set's panel width (48 for AVX-512, 16 for AVX2).
struct F32Panels {
    struct Free {
        void operator()(void* p) const { std::free(p); }
    };
    int64_t n = 0, k = 0;
    int nc = 0;
    CpuIsa isa = CpuIsa::portable;
    std::unique_ptr<float[], Free> data;
    const float* source = nullptr;  // the weight it was made from
    int64_t panels() const { return nc == 0 ? 0 : (n + nc - 1) / nc; }
};

// Whether `isa` has panel kernels (AVX-512, AVX2; the portable set reads W in place).
bool f32_panels_supported(CpuIsa isa);

// w: [n, k] row-major. Uses ex's threads for large weights. isa: f32_panels_supported.
F32Panels pack_f32_panels(const Exec& ex, CpuIsa isa, const float* w, int64_t n, int64_t k);

// y [m, n] (row stride ldy) = x [m, k] (row stride ldx) · Wᵀ + beta * y (y not read when
// beta == 0), split over ex's threads by panels.
void linear_f32_panels(const Exec& ex, int64_t m, const float* x, int64_t ldx, const F32Panels& w,
                       float beta, float* y, int64_t ldy);

// The per-family kernels (sgemm_avx512.cpp, sgemm_avx2.cpp): C = A · Wᵀ + beta * C for panels
// [p0, p1); and each family's panel width.
void panel_gemm_avx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                       const float* panels, int64_t p0, int64_t p1, float beta, float* c,
                       int64_t ldc);
void panel_gemm_avx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* panels, int64_t p0, int64_t p1, float beta, float* c,
                     int64_t ldc);
int panel_width_avx512();
int panel_width_avx2();

}  // namespace dflash::cpu

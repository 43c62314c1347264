// Row kernels: the elementwise loops and row reductions of the small CPU ops (attention's softmax,
// SwiGLU's sigmoid, RMSNorm's sum of squares) and AdamW's update, each written once and compiled
// twice, for AVX-512 and for the x86-64 baseline (SSE2), the copy picked by detected_isa() (isa.h).
// Tested by tests/ops/row_kernels_test.cpp.
//
// Note [row kernels]: decode, verify and draft run these loops on 1 to 16 rows per op; at 8 rows
// their SSE2 build took about a third of what a target layer spends outside its GEMMs
// (docs/performance.md, "row kernels"), and AdamW, kept scalar by errno, 8% of a pretraining
// step. The two copies are the same C++ compiled for two instruction sets: without
// -ffast-math the compiler only vectorises what keeps every operation's IEEE result, and
// row_kernels.cpp is compiled with -ffp-contract=off (CMakeLists.txt) so that no multiply and add
// become one fused instruction, and with -fno-math-errno so that AdamW's square root (correctly
// rounded either way) need not call libm to set errno, which kept the loop scalar. So the AVX-512
// copy gives the portable copy's bits for every input (NaN, infinities and signed zeros included),
// and the ops keep the bits they had before. Reductions keep their element-to-partial assignment
// (element i goes to partial i mod 8) and their fixed tree, so a row's result depends only on the
// row.
#pragma once

#include <cstdint>

#include "backend/cpu/isa.h"

namespace dflash::cpu {

// The largest of x[0, n) (std::max, so NaNs are skipped), -inf when n == 0: eight partial maxima
// combined in a fixed order.
float row_max(const float* x, int64_t n);
// The sum of x[0, n) in double: eight partial sums added in a fixed tree.
double row_sum(const float* x, int64_t n);
// The sum of x[i]^2 (products and sums in double), partials and tree as row_sum.
double row_sum_squares(const float* x, int64_t n);
// x[i] -= a; x[i] *= a; y[i] = w[i] * (x[i] * a).
void row_sub(float* x, int64_t n, float a);
void row_scale(float* x, int64_t n, float a);
void row_scale_weighted(const float* w, const float* x, float a, float* y, int64_t n);
// s[i] = sigmoid(g[i]) without overflow: e = exp(-|g|), 1/(1+e) for g >= 0, e/(1+e) below.
void row_sigmoid(const float* g, int64_t n, float* s);
// y[i] = a[i] * b[i] * c[i], left to right.
void row_mul3(const float* a, const float* b, const float* c, float* y, int64_t n);

// One AdamW update of n parameters (adamw.cpp has the formula): what the loop reads besides
// the arrays.
struct AdamWLoop {
    float decay, step_size, bc2_sqrt, b1, b2, eps, one_m_b1, one_m_b2;
    bool scaled;  // multiply the gradients by gs first
    float gs;
};
// p, m, v updated in place; out[i] = the new p[i] when out is not null.
void row_adamw(const AdamWLoop& a, float* p, const float* g, float* m, float* v, float* out,
               int64_t n);

// The same with the given kernels (tests compare the copies). isa avx2 runs the portable copy.
float row_max_with(CpuIsa isa, const float* x, int64_t n);
double row_sum_with(CpuIsa isa, const float* x, int64_t n);
double row_sum_squares_with(CpuIsa isa, const float* x, int64_t n);
void row_sub_with(CpuIsa isa, float* x, int64_t n, float a);
void row_scale_with(CpuIsa isa, float* x, int64_t n, float a);
void row_scale_weighted_with(CpuIsa isa, const float* w, const float* x, float a, float* y,
                             int64_t n);
void row_sigmoid_with(CpuIsa isa, const float* g, int64_t n, float* s);
void row_mul3_with(CpuIsa isa, const float* a, const float* b, const float* c, float* y, int64_t n);
void row_adamw_with(CpuIsa isa, const AdamWLoop& a, float* p, const float* g, float* m, float* v,
                    float* out, int64_t n);

}  // namespace dflash::cpu

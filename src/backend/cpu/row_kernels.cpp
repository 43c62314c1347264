// Row kernels (row_kernels.h, Note [row kernels]). Compiled with -ffp-contract=off and
// -fno-math-errno (CMakeLists.txt). Tested by tests/ops/row_kernels_test.cpp.
#include "backend/cpu/row_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/vexp.h"
#include "core/error.h"

namespace dflash::cpu {
namespace {

// The loops, inlined into both copies below: the AVX-512 copy's target then applies to them.
#define DF_ROW_BODY __attribute__((always_inline)) inline

// The eight partials of a reduction are the lanes of one vector (GCC's vector extensions: each
// lane computes exactly what the scalar partial did, and the loop is vectorised in both copies).
using F8 = float __attribute__((vector_size(32)));
using D8 = double __attribute__((vector_size(64)));

// By reference: a vector passed or returned by value would take another ABI in the SSE2 copy.
DF_ROW_BODY void load8(const float* x, F8& v) {
    std::memcpy(&v, x, sizeof(v));
}

DF_ROW_BODY float max_body(const float* x, int64_t n) {
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    F8 v = {kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf, kNegInf};
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        F8 xv;
        load8(x + c, xv);
        v = v < xv ? xv : v;  // std::max(part, x) in every lane: NaNs are skipped
    }
    float part[8];
    std::memcpy(part, &v, sizeof(part));
    for (int l = 0; c < n; ++c, ++l) part[l] = std::max(part[l], x[c]);
    for (int w = 4; w > 0; w /= 2) {
        for (int l = 0; l < w; ++l) part[l] = std::max(part[l], part[l + w]);
    }
    return part[0];
}

// Lane l of v is partial l; the tail's n < 8 terms go to partials 0 .. n-1 (element i to i mod 8),
// then the fixed tree.
DF_ROW_BODY double finish(const D8& v, const double* tail, int64_t n) {
    double part[8];
    std::memcpy(part, &v, sizeof(part));
    for (int64_t l = 0; l < n; ++l) part[l] += tail[l];
    return ((part[0] + part[4]) + (part[2] + part[6])) +
           ((part[1] + part[5]) + (part[3] + part[7]));
}

// The sum of x, or of x^2 (products in double: exact), per partial.
template <bool Squares>
DF_ROW_BODY double sum_of(const float* x, int64_t n) {
    D8 v = {};
    int64_t c = 0;
    for (; c + 8 <= n; c += 8) {
        F8 xv;
        load8(x + c, xv);
        const D8 d = __builtin_convertvector(xv, D8);
        v += Squares ? d * d : d;
    }
    double tail[8];
    for (int64_t l = 0; c + l < n; ++l) {
        const double d = x[c + l];
        tail[l] = Squares ? d * d : d;
    }
    return finish(v, tail, n - c);
}

DF_ROW_BODY double sum_body(const float* x, int64_t n) {
    return sum_of<false>(x, n);
}
DF_ROW_BODY double sum_squares_body(const float* x, int64_t n) {
    return sum_of<true>(x, n);
}

DF_ROW_BODY void sub_body(float* x, int64_t n, float a) {
    for (int64_t i = 0; i < n; ++i) x[i] -= a;
}

DF_ROW_BODY void scale_body(float* x, int64_t n, float a) {
    for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

DF_ROW_BODY void scale_weighted_body(const float* w, const float* x, float a, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * a);
}

// Never takes exp of a large positive number, so it cannot overflow to inf/inf.
DF_ROW_BODY void sigmoid_body(CpuIsa isa, const float* g, int64_t n, float* s) {
    for (int64_t i = 0; i < n; ++i) s[i] = -std::fabs(g[i]);
    exp_inplace_with(isa, s, n);
    for (int64_t i = 0; i < n; ++i) s[i] = (g[i] >= 0.0f ? 1.0f : s[i]) / (1.0f + s[i]);
}

DF_ROW_BODY void mul3_body(const float* a, const float* b, const float* c, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i] * c[i];
}

DF_ROW_BODY void adamw_body(const AdamWLoop& a, float* p, const float* pg, float* pm, float* pv,
                            float* out, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float g = a.scaled ? pg[i] * a.gs : pg[i];
        const float mi = a.b1 * pm[i] + a.one_m_b1 * g;
        const float vi = a.b2 * pv[i] + a.one_m_b2 * g * g;
        pm[i] = mi;
        pv[i] = vi;
        const float denom = std::sqrt(vi) / a.bc2_sqrt + a.eps;
        const float pi = p[i] * a.decay - a.step_size * (mi / denom);
        p[i] = pi;
        if (out) out[i] = pi;
    }
}

// name_avx512 and name_portable: the body `name_body` compiled for each instruction set.
#define DF_ROW_COPIES(ret, name, params, args)                    \
    __attribute__((target("avx512f"))) ret name##_avx512 params { \
        return name##_body args;                                  \
    }                                                             \
    ret name##_portable params {                                  \
        return name##_body args;                                  \
    }

DF_ROW_COPIES(float, max, (const float* x, int64_t n), (x, n))
DF_ROW_COPIES(double, sum, (const float* x, int64_t n), (x, n))
DF_ROW_COPIES(double, sum_squares, (const float* x, int64_t n), (x, n))
DF_ROW_COPIES(void, sub, (float* x, int64_t n, float a), (x, n, a))
DF_ROW_COPIES(void, scale, (float* x, int64_t n, float a), (x, n, a))
DF_ROW_COPIES(void, scale_weighted, (const float* w, const float* x, float a, float* y, int64_t n),
              (w, x, a, y, n))
DF_ROW_COPIES(void, sigmoid, (CpuIsa isa, const float* g, int64_t n, float* s), (isa, g, n, s))
DF_ROW_COPIES(void, mul3, (const float* a, const float* b, const float* c, float* y, int64_t n),
              (a, b, c, y, n))

DF_ROW_COPIES(void, adamw,
              (const AdamWLoop& a, float* p, const float* g, float* m, float* v, float* out,
               int64_t n),
              (a, p, g, m, v, out, n))

#undef DF_ROW_COPIES
#undef DF_ROW_BODY

bool avx512(CpuIsa isa) {
    DF_ASSERT(isa_supported(isa), "row kernels: {} asked for on a CPU whose best is {}",
              isa_name(isa), isa_name(detected_isa()));
    return isa == CpuIsa::avx512;
}

}  // namespace

float row_max_with(CpuIsa isa, const float* x, int64_t n) {
    return avx512(isa) ? max_avx512(x, n) : max_portable(x, n);
}
double row_sum_with(CpuIsa isa, const float* x, int64_t n) {
    return avx512(isa) ? sum_avx512(x, n) : sum_portable(x, n);
}
double row_sum_squares_with(CpuIsa isa, const float* x, int64_t n) {
    return avx512(isa) ? sum_squares_avx512(x, n) : sum_squares_portable(x, n);
}
void row_sub_with(CpuIsa isa, float* x, int64_t n, float a) {
    avx512(isa) ? sub_avx512(x, n, a) : sub_portable(x, n, a);
}
void row_scale_with(CpuIsa isa, float* x, int64_t n, float a) {
    avx512(isa) ? scale_avx512(x, n, a) : scale_portable(x, n, a);
}
void row_scale_weighted_with(CpuIsa isa, const float* w, const float* x, float a, float* y,
                             int64_t n) {
    avx512(isa) ? scale_weighted_avx512(w, x, a, y, n) : scale_weighted_portable(w, x, a, y, n);
}
void row_sigmoid_with(CpuIsa isa, const float* g, int64_t n, float* s) {
    avx512(isa) ? sigmoid_avx512(isa, g, n, s) : sigmoid_portable(isa, g, n, s);
}
void row_mul3_with(CpuIsa isa, const float* a, const float* b, const float* c, float* y,
                   int64_t n) {
    avx512(isa) ? mul3_avx512(a, b, c, y, n) : mul3_portable(a, b, c, y, n);
}

void row_adamw_with(CpuIsa isa, const AdamWLoop& a, float* p, const float* g, float* m, float* v,
                    float* out, int64_t n) {
    avx512(isa) ? adamw_avx512(a, p, g, m, v, out, n) : adamw_portable(a, p, g, m, v, out, n);
}

float row_max(const float* x, int64_t n) {
    return row_max_with(detected_isa(), x, n);
}
double row_sum(const float* x, int64_t n) {
    return row_sum_with(detected_isa(), x, n);
}
double row_sum_squares(const float* x, int64_t n) {
    return row_sum_squares_with(detected_isa(), x, n);
}
void row_sub(float* x, int64_t n, float a) {
    row_sub_with(detected_isa(), x, n, a);
}
void row_scale(float* x, int64_t n, float a) {
    row_scale_with(detected_isa(), x, n, a);
}
void row_scale_weighted(const float* w, const float* x, float a, float* y, int64_t n) {
    row_scale_weighted_with(detected_isa(), w, x, a, y, n);
}
void row_sigmoid(const float* g, int64_t n, float* s) {
    row_sigmoid_with(detected_isa(), g, n, s);
}
void row_mul3(const float* a, const float* b, const float* c, float* y, int64_t n) {
    row_mul3_with(detected_isa(), a, b, c, y, n);
}
void row_adamw(const AdamWLoop& a, float* p, const float* g, float* m, float* v, float* out,
               int64_t n) {
    row_adamw_with(detected_isa(), a, p, g, m, v, out, n);
}

}  // namespace dflash::cpu

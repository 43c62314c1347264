// The sgemm kernels for AVX-512F (16 fp32 lanes), chosen at run time (sgemm.cpp). Tested by
// tests/ops/sgemm_test.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/sgemm.h"

// Everything below is compiled for AVX-512; it runs only where sgemm_detected_isa() says so.
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
// GCC 12's AVX-512 shuffles and extracts start from _mm512_undefined_ps(), which -Wuninitialized
// reports (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "backend/cpu/sgemm_kernels.h"

namespace dflash::cpu {
namespace {

struct Avx512 {
    using T = __m512;
    static constexpr int W = 16;
    static constexpr int kDotRows = 8, kDotCols = 3;    // 24 accumulators of 32 registers
    static constexpr int kAxpyRows = 6, kAxpyVecs = 4;  // 6 x 64 columns
    static __mmask16 mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
    static T zero() { return _mm512_setzero_ps(); }
    static T load(const float* p) { return _mm512_loadu_ps(p); }
    static T load_n(const float* p, int n) { return _mm512_maskz_loadu_ps(mask(n), p); }
    static void store_n(float* p, T v, int n) { _mm512_mask_storeu_ps(p, mask(n), v); }
    static T set1(float x) { return _mm512_set1_ps(x); }
    static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
    static T mul(T a, T b) { return _mm512_mul_ps(a, b); }
    static T add(T a, T b) { return _mm512_add_ps(a, b); }
    static float sum(T v) {  // fixed tree: 16 -> 8 -> 4 -> 2 -> 1
        const __m512 f = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
        const __m256 h = _mm512_castps512_ps256(f);
        __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
        q = _mm_add_ps(q, _mm_movehl_ps(q, q));
        q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
        return _mm_cvtss_f32(q);
    }
};

}  // namespace

void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b,
                  float beta, float* c, int64_t ldc, bool packed) {
    sgemm_impl<Avx512>(m, n, k, alpha, a, b, beta, c, ldc, packed);
}

}  // namespace dflash::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

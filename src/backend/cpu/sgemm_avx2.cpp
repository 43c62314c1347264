// The sgemm kernels for AVX2 + FMA (8 fp32 lanes), chosen at run time (sgemm.cpp). Tested by
// tests/ops/sgemm_test.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/f32_panels.h"
#include "backend/cpu/sgemm.h"

// Everything below is compiled for AVX2 + FMA; it runs only where detected_isa() says so.
#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "backend/cpu/sgemm_kernels.h"

namespace dflash::cpu {
namespace {

struct Avx2 {
    using T = __m256;
    static constexpr int W = 8;
    static constexpr int kDotRows = 4, kDotCols = 3;    // 12 accumulators of 16 registers
    static constexpr int kAxpyRows = 6, kAxpyVecs = 2;  // 6 x 16 columns
    // 6 x 16 columns: 12 accumulators, 2 panel vectors and x of the 16 registers.
    static constexpr int kPanelRows = 6, kPanelVecs = 2;
    static constexpr bool kSum4 = false;
    static __m256i mask(int n) {
        return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    }
    static T zero() { return _mm256_setzero_ps(); }
    static T load(const float* p) { return _mm256_loadu_ps(p); }
    static T load_n(const float* p, int n) { return _mm256_maskload_ps(p, mask(n)); }
    static void store_n(float* p, T v, int n) { _mm256_maskstore_ps(p, mask(n), v); }
    static T set1(float x) { return _mm256_set1_ps(x); }
    static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
    static T mul(T a, T b) { return _mm256_mul_ps(a, b); }
    static T add(T a, T b) { return _mm256_add_ps(a, b); }
    // r[c] = column c of the 8 x 8 block whose rows were r: 4 x 4 blocks by unpacking pairs of
    // floats then of doubles, then the two 128-bit halves swapped across.
    static void transpose(T (&r)[8]) {
        T t[8];
        for (int i = 0; i < 8; i += 2) {
            t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
        }
        // u[4g + c]: rows 4g..4g+3, columns c and c+4 in the two halves.
        T u[8];
        for (int g = 0; g < 2; ++g) {
            const __m256d a = _mm256_castps_pd(t[4 * g]), b = _mm256_castps_pd(t[4 * g + 1]);
            const __m256d c = _mm256_castps_pd(t[4 * g + 2]), d = _mm256_castps_pd(t[4 * g + 3]);
            u[4 * g] = _mm256_castpd_ps(_mm256_unpacklo_pd(a, c));
            u[4 * g + 1] = _mm256_castpd_ps(_mm256_unpackhi_pd(a, c));
            u[4 * g + 2] = _mm256_castpd_ps(_mm256_unpacklo_pd(b, d));
            u[4 * g + 3] = _mm256_castpd_ps(_mm256_unpackhi_pd(b, d));
        }
        for (int c = 0; c < 4; ++c) {
            r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
            r[c + 4] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
        }
    }
    static float sum(T v) {  // fixed tree: 8 -> 4 -> 2 -> 1
        __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        q = _mm_add_ps(q, _mm_movehl_ps(q, q));
        q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
        return _mm_cvtss_f32(q);
    }
};

}  // namespace

void panel_gemm_avx2(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                     const float* panels, int64_t p0, int64_t p1, float beta, float* c,
                     int64_t ldc) {
    panel_gemm<Avx2>(m, n, k, a, lda, panels, p0, p1, beta, c, ldc);
}

int panel_width_avx2() {
    return Avx2::kPanelVecs * Avx2::W;
}

void sgemm_avx2(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b, float beta,
                float* c, int64_t ldc, bool packed) {
    sgemm_impl<Avx2>(m, n, k, alpha, a, b, beta, c, ldc, packed);
}

}  // namespace dflash::cpu

#pragma GCC pop_options

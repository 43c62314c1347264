// The sgemm kernels for AVX-512F (16 fp32 lanes), chosen at run time (sgemm.cpp). Tested by
// tests/ops/sgemm_test.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/f32_panels.h"
#include "backend/cpu/sgemm.h"

// Everything below is compiled for AVX-512; it runs only where detected_isa() says so.
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
    static constexpr int kDotRows = 4, kDotCols = 4;    // measured best of 8x3, 6x4, 4x6, 8x2
    static constexpr int kAxpyRows = 6, kAxpyVecs = 4;  // 6 x 64 columns
    // 8 x 48 columns: an 8-row verify in one pass over each panel (Note [f32 panels]).
    static constexpr int kPanelRows = 8, kPanelVecs = 3;
    static constexpr bool kSum4 = true;
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
    // r[c] = column c of the 16 x 16 block whose rows were r: 4 x 4 blocks by unpacking pairs of
    // floats then of doubles, then the 4 x 4 grid of 128-bit lanes by two rounds of lane shuffles.
    static void transpose(T (&r)[16]) {
        T t[16];
        for (int i = 0; i < 16; i += 2) {
            t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
            t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
        }
        // u[4g + c]: rows 4g..4g+3, columns c, c+4, c+8, c+12 in lanes 0..3.
        T u[16];
        for (int g = 0; g < 4; ++g) {
            const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]);
            const __m512d c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
            u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
            u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
            u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
            u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
        }
        for (int c = 0; c < 4; ++c) {
            const T v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x88);
            const T v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xDD);
            const T v2 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x88);
            const T v3 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xDD);
            r[c] = _mm512_shuffle_f32x4(v0, v2, 0x88);
            r[c + 4] = _mm512_shuffle_f32x4(v1, v3, 0x88);
            r[c + 8] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
            r[c + 12] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
        }
    }
    // The four sums of sum()'s tree side by side: 16 -> 8 (lane l + lane l+8) for two
    // accumulators per instruction, 8 -> 4 (l + l+4) for four, then 4 -> 2 -> 1 in each 128-bit
    // lane; lane 0 of 128-bit lane q then holds the sum of accumulator q.
    static void store_sums4(const T (&v)[4], float alpha, float beta, float* c) {
        const T ab = _mm512_add_ps(_mm512_shuffle_f32x4(v[0], v[1], 0x44),
                                   _mm512_shuffle_f32x4(v[0], v[1], 0xEE));
        const T cd = _mm512_add_ps(_mm512_shuffle_f32x4(v[2], v[3], 0x44),
                                   _mm512_shuffle_f32x4(v[2], v[3], 0xEE));
        T q = _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xDD));
        q = _mm512_add_ps(q, _mm512_permute_ps(q, 0x4E));  // (l + l^2): lanes 0, 1
        q = _mm512_add_ps(q, _mm512_permute_ps(q, 0xB1));  // (l + l^1): lane 0
        const __m512i first = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
        __m128 r =
            _mm_mul_ps(_mm_set1_ps(alpha), _mm512_castps512_ps128(_mm512_permutexvar_ps(first, q)));
        if (beta != 0.0f) r = _mm_add_ps(r, _mm_mul_ps(_mm_set1_ps(beta), _mm_loadu_ps(c)));
        _mm_storeu_ps(c, r);
    }
};

}  // namespace

void panel_gemm_avx512(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                       const float* panels, int64_t p0, int64_t p1, float beta, float* c,
                       int64_t ldc) {
    panel_gemm<Avx512>(m, n, k, a, lda, panels, p0, p1, beta, c, ldc);
}

int panel_width_avx512() {
    return Avx512::kPanelVecs * Avx512::W;
}

void sgemm_avx512(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b,
                  float beta, float* c, int64_t ldc, bool packed) {
    sgemm_impl<Avx512>(m, n, k, alpha, a, b, beta, c, ldc, packed);
}

}  // namespace dflash::cpu

#pragma GCC diagnostic pop
#pragma GCC pop_options

// The sgemm kernels for AVX2 + FMA (8 fp32 lanes), chosen at run time (sgemm.cpp). Tested by
// tests/ops/sgemm_test.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

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
    static float sum(T v) {  // fixed tree: 8 -> 4 -> 2 -> 1
        __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        q = _mm_add_ps(q, _mm_movehl_ps(q, q));
        q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));
        return _mm_cvtss_f32(q);
    }
};

}  // namespace

void sgemm_avx2(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b, float beta,
                float* c, int64_t ldc, bool packed) {
    sgemm_impl<Avx2>(m, n, k, alpha, a, b, beta, c, ldc, packed);
}

}  // namespace dflash::cpu

#pragma GCC pop_options

// Vectorised exp (vexp.h, Note [vexp]). Tested by tests/ops/vexp_test.cpp.
#include "backend/cpu/vexp.h"

#include <immintrin.h>

#include <cmath>

#include "core/error.h"

namespace dflash::cpu {
namespace {

constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;  // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has 9 bits
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kMaxX = 88.7228317f;   // exp(kMaxX) is the largest finite float
constexpr float kMinX = -87.3365479f;  // exp(kMinX) is the smallest normal float
constexpr float kTaylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24,
                              1.0f / 6,    0.5f,       1.0f,       1.0f};  // e^r, highest first

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_ps(), which -Wuninitialized reports
// (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

__attribute__((target("avx512f"))) void exp_avx512(float* x, int64_t n) {
    for (int64_t i = 0; i < n; i += 16) {
        const int left = static_cast<int>(n - i < 16 ? n - i : 16);
        const __mmask16 m = static_cast<__mmask16>((1u << left) - 1u);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        const __m512 c = _mm512_max_ps(_mm512_min_ps(v, _mm512_set1_ps(100.0f)),
                                       _mm512_set1_ps(-110.0f));  // NaN -> -110, fixed below
        const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(kLog2e)),
                                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), c);
        r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
        __m512 p = _mm512_set1_ps(kTaylor[0]);
        for (int t = 1; t < 8; ++t) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kTaylor[t]));
        __m512 e = _mm512_scalef_ps(p, k);  // p * 2^k: inf above the range, 0/denormal below
        e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(v, _mm512_set1_ps(kMaxX), _CMP_GT_OQ),
                               _mm512_set1_ps(INFINITY));
        e = _mm512_mask_mov_ps(e, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), v);  // NaN
        _mm512_mask_storeu_ps(x + i, m, e);
    }
}

#pragma GCC diagnostic pop

__attribute__((target("avx2,fma"))) void exp_avx2(float* x, int64_t n) {
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t i = 0; i < n; i += 8) {
        const int left = static_cast<int>(n - i < 8 ? n - i : 8);
        const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(left), lanes);
        const __m256 v = _mm256_maskload_ps(x + i, m);
        // Clamped to the normal range (NaN -> kMinX; fixed below).
        const __m256 c =
            _mm256_max_ps(_mm256_min_ps(v, _mm256_set1_ps(kMaxX)), _mm256_set1_ps(kMinX));
        const __m256 k = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(kLog2e)),
                                         _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), c);
        r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
        __m256 p = _mm256_set1_ps(kTaylor[0]);
        for (int t = 1; t < 8; ++t) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kTaylor[t]));
        // 2^k through the exponent field; k in [-126, 128]: 2^128 overflows, so scale twice.
        const __m256i ki = _mm256_cvtps_epi32(k);
        const __m256i half = _mm256_srai_epi32(ki, 1);
        const __m256 s1 = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_add_epi32(half, _mm256_set1_epi32(127)), 23));
        const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(
            _mm256_add_epi32(_mm256_sub_epi32(ki, half), _mm256_set1_epi32(127)), 23));
        __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
        e = _mm256_blendv_ps(e, _mm256_set1_ps(INFINITY),
                             _mm256_cmp_ps(v, _mm256_set1_ps(kMaxX), _CMP_GT_OQ));
        e = _mm256_blendv_ps(e, _mm256_setzero_ps(),
                             _mm256_cmp_ps(v, _mm256_set1_ps(kMinX), _CMP_LT_OQ));
        e = _mm256_blendv_ps(e, v, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));  // NaN
        _mm256_maskstore_ps(x + i, m, e);
    }
}

}  // namespace

void exp_inplace_with(CpuIsa isa, float* x, int64_t n) {
    DF_ASSERT(isa_supported(isa), "exp: {} kernels asked for on a CPU whose best is {}",
              isa_name(isa), isa_name(detected_isa()));
    switch (isa) {
        case CpuIsa::avx512:
            return exp_avx512(x, n);
        case CpuIsa::avx2:
            return exp_avx2(x, n);
        case CpuIsa::portable:
            break;
    }
    for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}

void exp_inplace(float* x, int64_t n) {
    exp_inplace_with(detected_isa(), x, n);
}

}  // namespace dflash::cpu

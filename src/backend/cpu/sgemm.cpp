// sgemm dispatch and the portable kernels (Note [sgemm] in sgemm.h). Tested by
// tests/ops/sgemm_test.cpp.
#include "backend/cpu/sgemm.h"

#include "backend/cpu/isa.h"
#include "core/error.h"

namespace dflash::cpu {
// One element at a time, k in order: the fallback for CPUs without AVX2 and for op(A)ᵀ·op(B)ᵀ,
// which no op uses.
void sgemm_portable(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b,
                    float beta, float* c, int64_t ldc) {
    const int64_t a_row = a.trans ? 1 : a.ld, a_col = a.trans ? a.ld : 1;
    const int64_t b_row = b.trans ? 1 : b.ld, b_col = b.trans ? b.ld : 1;
    for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
            float s = 0.0f;
            for (int64_t kk = 0; kk < k; ++kk)
                s += a.p[i * a_row + kk * a_col] * b.p[kk * b_row + j * b_col];
            float r = alpha * s;
            if (beta != 0.0f) r = r + beta * c[i * ldc + j];
            c[i * ldc + j] = r;
        }
    }
}

void sgemm_with(CpuIsa isa, int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b,
                float beta, float* c, int64_t ldc, int64_t plan_rows) {
    const bool packed = (plan_rows > 0 ? plan_rows : m) >= kSgemmPackRows;
    DF_ASSERT(isa_supported(isa), "sgemm: {} kernels asked for on a CPU whose best is {}",
              isa_name(isa), isa_name(detected_isa()));
    switch (isa) {
        case CpuIsa::avx512:
            return sgemm_avx512(m, n, k, alpha, a, b, beta, c, ldc, packed);
        case CpuIsa::avx2:
            return sgemm_avx2(m, n, k, alpha, a, b, beta, c, ldc, packed);
        case CpuIsa::portable:
            break;
    }
    sgemm_portable(m, n, k, alpha, a, b, beta, c, ldc);
}

void sgemm(int64_t m, int64_t n, int64_t k, float alpha, MatrixRef a, MatrixRef b, float beta,
           float* c, int64_t ldc, int64_t plan_rows) {
    sgemm_with(detected_isa(), m, n, k, alpha, a, b, beta, c, ldc, plan_rows);
}

}  // namespace dflash::cpu

// exp over arrays of fp32, vectorised: the exponentials of softmax (attention) and SiLU (swiglu)
// cost as much as a verify's GEMMs when taken one std::exp at a time. Tested by
// tests/ops/vexp_test.cpp.
//
// Note [vexp]: x = n ln2 + r with n = round(x / ln2) and |r| <= ln2 / 2 (ln2 in two parts, so r
// is exact to ~1e-10), e^r by its Taylor polynomial of degree 7 (truncation < 6e-9 relative),
// Horner with fused multiply-adds, times 2^n. Within 2 ulp of the exact value (std::exp: < 1)
// for results in the normal range; results below it flush to 0 in the AVX2 version; x > 88.72
// gives inf, exp(-inf) = 0, NaN stays NaN. The same x gives the same bits wherever it sits in the
// array (tails are masked, not handled by other code), so results do not depend on how rows are
// split; they do depend on the instruction set (isa.h), like the GEMM's.
#pragma once

#include <cstdint>

#include "backend/cpu/isa.h"

namespace dflash::cpu {

// x[i] = exp(x[i]) for i < n, with the kernels of detected_isa() (portable: std::exp).
void exp_inplace(float* x, int64_t n);
// The same with the given kernels (tests).
void exp_inplace_with(CpuIsa isa, float* x, int64_t n);

}  // namespace dflash::cpu

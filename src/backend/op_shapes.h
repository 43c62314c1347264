// Argument checks that every backend's ops share (dtypes and devices are each backend's own
// business): GEMM shapes and AdamW's element counts and hyper-parameters. A violation is a
// dflash::Error naming the op, the tensors and what was expected.
// Tested by tests/ops/gemm_test.cpp and tests/ops/adamw_test.cpp (and their CUDA twins).
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "core/tensor.h"

namespace dflash {

// C [m, n] = op(A) [m, k] · op(B) [k, n]; tensors of rank > 2 are viewed as [numel/last, last].
struct GemmDims {
    int64_t m = 0, n = 0, k = 0;
};
GemmDims check_gemm_shapes(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                           const Tensor& c);

// master, grad, m, v of equal element counts; step >= 1; betas in [0, 1).
void check_adamw_args(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                      const AdamWParams& p);

}  // namespace dflash

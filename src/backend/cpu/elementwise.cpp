// Residual add / gradient accumulation (y += alpha * x) and scaling (y *= alpha).
// Tested by tests/ops/elementwise_test.cpp.
#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

// Tensors are contiguous, so only the element count has to agree (a [S, H, Dh] view may be added
// to its [S, H*Dh] twin).
void add_inplace(const Exec& ex, const Tensor& y, const Tensor& x, float alpha) {
    check_cpu_f32(y, "add_inplace", "y");
    check_cpu_f32(x, "add_inplace", "x");
    DF_CHECK(y.numel() == x.numel(),
             "add_inplace: y has shape {} ({} elements) but x has {} ({} elements)",
             y.shape().to_string(), y.numel(), x.shape().to_string(), x.numel());
    const int64_t n = y.numel();
    float* py = y.f32();
    const float* px = x.f32();
    if (alpha == 1.0f) {
        parallel_for(ex, n, n > 32768, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                py[i] += px[i];
            }
        });
    } else {
        parallel_for(ex, n, n > 32768, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
                py[i] += alpha * px[i];
            }
        });
    }
}

void scale_inplace(const Exec& ex, const Tensor& y, float alpha) {
    check_cpu_f32(y, "scale_inplace", "y");
    const int64_t n = y.numel();
    float* py = y.f32();
    parallel_for(ex, n, n > 32768, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
            py[i] *= alpha;
        }
    });
}

}  // namespace dflash::cpu

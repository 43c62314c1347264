// Residual add / gradient accumulation (y += alpha * x), scaling (y *= alpha) and row biases.
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

void add_row_bias(const Exec& ex, const Tensor& y, const Tensor& bias) {
    check_cpu_f32(y, "add_row_bias", "y");
    check_cpu_f32(bias, "add_row_bias", "bias");
    const int64_t c = bias.numel();
    DF_CHECK(c > 0 && y.numel() % c == 0 && y.dim(-1) == c,
             "add_row_bias: y is {} but bias is {}; expected y [R, C] and bias [C]", y.describe(),
             bias.describe());
    const int64_t rows = y.numel() / c;
    float* py = y.f32();
    const float* pb = bias.f32();
    parallel_for(ex, rows, y.numel() > 32768, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            for (int64_t i = 0; i < c; ++i) py[r * c + i] += pb[i];
        }
    });
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

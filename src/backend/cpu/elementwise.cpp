// Residual add / gradient accumulation (y += alpha * x), scaling (y *= alpha) and row biases.
// Tested by tests/ops/elementwise_test.cpp.
#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {

void add_inplace(const Exec& ex, const Tensor& y, const Tensor& x, float alpha) {
    check_cpu_f32(y, "add_inplace", "y");
    check_cpu_f32(x, "add_inplace", "x");
    check_add_inplace_shapes(y, x);
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
    check_add_row_bias_shapes(y, bias);
    const int64_t c = bias.numel();
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

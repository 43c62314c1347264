// Gating (backend/op_list.h: sigmoid_mul, add_sigmoid_scaled): the hybrid families' sigmoid output
// gate of the full-attention layers and the shared expert's per-row gate, in f32.
// Tested by tests/ops/gating_test.cpp.
#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/row_kernels.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

constexpr int64_t kBlock = 256;  // sigmoids taken at once (row_sigmoid)

}  // namespace

void sigmoid_mul(const Exec& ex, const Tensor& x, const Tensor& gate, const Tensor& y) {
    check_cpu_f32(x, "sigmoid_mul", "x");
    check_cpu_f32(gate, "sigmoid_mul", "gate");
    check_cpu_f32(y, "sigmoid_mul", "y");
    check_sigmoid_mul_shapes(x, gate, y);
    const int64_t n = x.numel();
    const float* px = x.f32();
    const float* g = gate.f32();
    float* py = y.f32();
    parallel_for(ex, n, n > 16384, [&](int64_t i0, int64_t i1) {
        float s[kBlock];
        for (int64_t b = i0; b < i1; b += kBlock) {
            const int64_t m = std::min(kBlock, i1 - b);
            row_sigmoid(g + b, m, s);
            for (int64_t i = 0; i < m; ++i) py[b + i] = px[b + i] * s[i];
        }
    });
}

void add_sigmoid_scaled(const Exec& ex, const Tensor& y, const Tensor& x, const Tensor& s) {
    check_cpu_f32(y, "add_sigmoid_scaled", "y");
    check_cpu_f32(x, "add_sigmoid_scaled", "x");
    check_cpu_f32(s, "add_sigmoid_scaled", "s");
    const int64_t rows = check_add_sigmoid_scaled_shapes(y, x, s);
    if (rows == 0) return;
    const int64_t cols = y.numel() / rows;
    const float* px = x.f32();
    const float* ps = s.f32();
    float* py = y.f32();
    parallel_for(ex, rows, y.numel() > 16384, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            float gate;
            row_sigmoid(ps + r, 1, &gate);
            for (int64_t c = 0; c < cols; ++c) py[r * cols + c] += gate * px[r * cols + c];
        }
    });
}

}  // namespace dflash::cpu

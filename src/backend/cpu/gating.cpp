// Gating (backend/op_list.h: sigmoid_mul, add_sigmoid_scaled, sigmoid_mul_bwd): the hybrid
// families' sigmoid output gate of the full-attention layers, the shared expert's per-row gate and
// the backward of DSpark's gated Markov head, in f32. Tested by tests/ops/gating_test.cpp.
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

void sigmoid_mul_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& gate,
                     const Tensor& dx, const Tensor& dgate, const Tensor& dgate_sum) {
    check_cpu_f32(dy, "sigmoid_mul_bwd", "dy");
    check_cpu_f32(x, "sigmoid_mul_bwd", "x");
    check_cpu_f32(gate, "sigmoid_mul_bwd", "gate");
    check_cpu_f32(dx, "sigmoid_mul_bwd", "dx");
    check_cpu_f32(dgate, "sigmoid_mul_bwd", "dgate");
    if (!dgate_sum.empty()) check_cpu_f32(dgate_sum, "sigmoid_mul_bwd", "dgate_sum");
    const int64_t cols = check_sigmoid_mul_bwd_shapes(dy, x, gate, dx, dgate, dgate_sum);
    const int64_t n = x.numel();
    const float* pdy = dy.f32();
    const float* px = x.f32();
    const float* g = gate.f32();
    float* pdx = dx.f32();
    float* pdg = dgate.f32();
    parallel_for(ex, n, n > 16384, [&](int64_t i0, int64_t i1) {
        float s[kBlock];
        for (int64_t b = i0; b < i1; b += kBlock) {
            const int64_t m = std::min(kBlock, i1 - b);
            row_sigmoid(g + b, m, s);
            for (int64_t i = 0; i < m; ++i) {
                pdx[b + i] += pdy[b + i] * s[i];
                pdg[b + i] = pdy[b + i] * px[b + i] * (s[i] * (1.0f - s[i]));
            }
        }
    });
    if (dgate_sum.empty() || n == 0) return;
    // The bias's gradient: column sums in row order, in double (the compute dtype is f32 here, so
    // the written dgate is the unrounded value the contract sums).
    const int64_t rows = n / cols;
    for (int64_t c = 0; c < cols; ++c) {
        double sum = 0;
        for (int64_t r = 0; r < rows; ++r) sum += pdg[r * cols + c];
        dgate_sum.f32()[c] += static_cast<float>(sum);
    }
}

}  // namespace dflash::cpu

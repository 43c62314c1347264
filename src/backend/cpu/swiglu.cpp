// SwiGLU: out = silu(gate) * up over [R, I], and its backward. Tested by tests/ops/swiglu_test.cpp.
#include <algorithm>
#include <cmath>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/row_kernels.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

// Elements whose sigmoids are taken at once (row_sigmoid: exp(-|g|), then 1/(1+e) or e/(1+e)).
constexpr int64_t kBlock = 256;

// Calls fn(i, sigmoid(g[i])) for every i in [i0, i1), a block of exponentials at a time.
template <typename Fn>
void for_each_sigmoid(const float* g, int64_t i0, int64_t i1, Fn&& fn) {
    float s[kBlock];
    for (int64_t b = i0; b < i1; b += kBlock) {
        const int64_t n = std::min(kBlock, i1 - b);
        row_sigmoid(g + b, n, s);
        for (int64_t i = 0; i < n; ++i) fn(b + i, s[i]);
    }
}

}  // namespace

void swiglu_fwd(const Exec& ex, const Tensor& gate, const Tensor& up, const Tensor& out) {
    check_cpu_f32(gate, "swiglu_fwd", "gate");
    check_cpu_f32(up, "swiglu_fwd", "up");
    check_cpu_f32(out, "swiglu_fwd", "out");
    check_swiglu_fwd_shapes(gate, up, out);
    const int64_t n = gate.numel();
    const float* g = gate.f32();
    const float* u = up.f32();
    float* o = out.f32();
    parallel_for(ex, n, n > 16384, [&](int64_t i0, int64_t i1) {
        float s[kBlock];
        for (int64_t b = i0; b < i1; b += kBlock) {
            const int64_t m = std::min(kBlock, i1 - b);
            row_sigmoid(g + b, m, s);
            row_mul3(g + b, s, u + b, o + b, m);  // (g * s) * u
        }
    });
}

// d silu(g)/dg = s + g s (1 - s), s = sigmoid(g).
void swiglu_bwd(const Exec& ex, const Tensor& dout, const Tensor& gate, const Tensor& up,
                const Tensor& dgate, const Tensor& dup) {
    check_cpu_f32(dout, "swiglu_bwd", "dout");
    check_cpu_f32(gate, "swiglu_bwd", "gate");
    check_cpu_f32(up, "swiglu_bwd", "up");
    check_cpu_f32(dgate, "swiglu_bwd", "dgate");
    check_cpu_f32(dup, "swiglu_bwd", "dup");
    check_swiglu_bwd_shapes(dout, gate, up, dgate, dup);
    const int64_t n = gate.numel();
    const float* d = dout.f32();
    const float* g = gate.f32();
    const float* u = up.f32();
    float* dg = dgate.f32();
    float* du = dup.f32();
    parallel_for(ex, n, n > 16384, [&](int64_t i0, int64_t i1) {
        for_each_sigmoid(g, i0, i1, [&](int64_t i, float s) {
            const float gi = g[i];
            // Read everything before writing: dgate/dup may alias dout.
            const float di = d[i];
            const float ui = u[i];
            du[i] = di * gi * s;
            dg[i] = di * ui * (s + gi * s * (1.0f - s));
        });
    });
}

}  // namespace dflash::cpu

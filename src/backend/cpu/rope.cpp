// RoPE, NeoX rotate-half layout: inverse frequencies with the rope_scaling variants (none, linear,
// llama3) and the in-place rotation of x [S, H, Dh] (forward) or its gradient (backward); with
// R/2 < Dh/2 inverse frequencies only the first R dims of each head turn (partial rotary).
// Tested by tests/ops/rope_test.cpp.
#include <cmath>
#include <numbers>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

// Rotates every head of every row by angle(s, i) = float(pos[s]) * inv_freq[i]; `sign` -1 rotates
// by the negative angle (the transpose, used by the backward).
void rotate(const Exec& ex, const Tensor& x, const Tensor& positions, const Tensor& inv_freq,
            float sign, const char* op) {
    check_cpu_f32(x, op, "x");
    check_rope_shapes(x, positions, inv_freq, op);
    check_cpu_f32(inv_freq, op, "inv_freq");
    const int64_t s_len = x.dim(0);
    const int64_t heads = x.dim(1);
    const int64_t dh = x.dim(2);
    // Partial rotary (the hybrid families): pairs (i, i + half) within the first 2 * half dims.
    const int64_t half = inv_freq.numel();
    const int32_t* pos = positions.i32();
    const float* freq = inv_freq.f32();
    float* px = x.f32();
    parallel_for(ex, s_len, x.numel() > 16384, [&](int64_t s0, int64_t s1) {
        std::vector<float> cs(half), sn(half);
        for (int64_t s = s0; s < s1; ++s) {
            // float32 angle, cos and sin, as the HF reference computes them.
            const float p = static_cast<float>(pos[s]);
            for (int64_t i = 0; i < half; ++i) {
                const float angle = p * freq[i];
                cs[i] = std::cos(angle);
                sn[i] = sign * std::sin(angle);
            }
            for (int64_t h = 0; h < heads; ++h) {
                float* v = px + (s * heads + h) * dh;
                for (int64_t i = 0; i < half; ++i) {
                    const float a = v[i];
                    const float b = v[i + half];
                    v[i] = a * cs[i] - b * sn[i];
                    v[i + half] = b * cs[i] + a * sn[i];
                }
            }
        }
    });
}

}  // namespace

void rope_fwd(const Exec& ex, const Tensor& x, const Tensor& positions, const Tensor& inv_freq) {
    rotate(ex, x, positions, inv_freq, 1.0f, "rope_fwd");
}

void rope_bwd(const Exec& ex, const Tensor& dx, const Tensor& positions, const Tensor& inv_freq) {
    rotate(ex, dx, positions, inv_freq, -1.0f, "rope_bwd");
}

}  // namespace dflash::cpu

namespace dflash {

// Follows transformers' _compute_default_rope_parameters / _compute_linear_scaling_rope_parameters
// / _compute_llama3_parameters, in float32 and in the same order of operations, so positions far
// into a long context rotate by the same angles as the model was trained with.
std::vector<float> rope_inv_freq(const RopeConfig& cfg, int64_t head_dim) {
    DF_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim={} must be positive and even",
             head_dim);
    DF_CHECK(cfg.theta > 1.0, "rope: rope_theta={} must be > 1", cfg.theta);
    const RopeScaling& sc = cfg.scaling;
    const int64_t half = head_dim / 2;
    const float base = static_cast<float>(cfg.theta);
    std::vector<float> inv(half);
    for (int64_t i = 0; i < half; ++i) {
        const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
        inv[i] = 1.0f / std::pow(base, exponent);
    }
    if (sc.type == RopeScalingType::none) return inv;
    DF_CHECK(sc.factor > 0, "rope_scaling.factor={} must be > 0", sc.factor);
    const float factor = static_cast<float>(sc.factor);
    if (sc.type == RopeScalingType::linear) {
        for (float& f : inv) f /= factor;
        return inv;
    }
    DF_ASSERT(sc.type == RopeScalingType::llama3);
    DF_CHECK(sc.high_freq_factor > sc.low_freq_factor && sc.low_freq_factor > 0,
             "rope_scaling (llama3): high_freq_factor={} must exceed low_freq_factor={} > 0",
             sc.high_freq_factor, sc.low_freq_factor);
    DF_CHECK(sc.original_max_position > 0,
             "rope_scaling (llama3): original_max_position_embeddings={} must be > 0",
             sc.original_max_position);
    const float old_ctx = static_cast<float>(sc.original_max_position);
    const float low_ff = static_cast<float>(sc.low_freq_factor);
    const float high_ff = static_cast<float>(sc.high_freq_factor);
    const float low_freq_wavelen =
        static_cast<float>(sc.original_max_position / sc.low_freq_factor);
    const float high_freq_wavelen =
        static_cast<float>(sc.original_max_position / sc.high_freq_factor);
    const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
    for (float& f : inv) {
        const float wavelen = two_pi / f;
        if (wavelen > low_freq_wavelen) {
            f = f / factor;  // long wavelengths: interpolate fully
        } else if (!(wavelen < high_freq_wavelen)) {
            // between the two: blend the scaled and unscaled frequency
            const float smooth = (old_ctx / wavelen - low_ff) / (high_ff - low_ff);
            f = (1.0f - smooth) * f / factor + smooth * f;
        }  // short wavelengths: unchanged
    }
    return inv;
}

}  // namespace dflash

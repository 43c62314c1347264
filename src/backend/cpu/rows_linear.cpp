// The decode block's ops on the CPU (backend/op_list.h: rows_linear, qk_norm_rope_cache): plain
// loops that are the oracle of the CUDA kernels (tests/cuda/rows_linear_cuda_test.cpp). Every
// output is a sum over k in ascending order in double, rounded once to f32, so a row depends on
// nothing but its own inputs. The CPU engine itself decodes through its fp32 panels (Note [f32
// panels]), not through these. Tested by tests/ops/rows_linear_test.cpp.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

float dot(const float* a, const float* b, int64_t k) {
    double s = 0;
    for (int64_t i = 0; i < k; ++i) s += static_cast<double>(a[i]) * b[i];
    return static_cast<float>(s);
}

float silu(float g) {
    return static_cast<float>(static_cast<double>(g) / (1.0 + std::exp(-static_cast<double>(g))));
}

// In place on one head v [dh]: RMSNorm with w (when not null), then the NeoX rotation of the
// first 2 * half dims by angles pos * freq[i].
void norm_rope_head(float* v, int64_t dh, const float* w, float eps, float pos, const float* freq,
                    int64_t half) {
    if (w != nullptr) {
        double ss = 0;
        for (int64_t i = 0; i < dh; ++i) ss += static_cast<double>(v[i]) * v[i];
        const auto rstd = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dh) + eps));
        for (int64_t i = 0; i < dh; ++i) v[i] = w[i] * (v[i] * rstd);
    }
    for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * freq[i];
        const float c = std::cos(angle), s = std::sin(angle);
        const float a = v[i], b = v[i + half];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
    }
}

}  // namespace

void rows_linear(const Exec& ex, const Tensor& x, const RowsLinear& w, const Tensor& residual,
                 const Tensor& y) {
    const char* op = "rows_linear";
    check_cpu_f32(x, op, "x");
    check_cpu_f32(y, op, "y");
    for (const Tensor& wi : w.w)
        if (!wi.empty()) check_cpu_f32(wi, op, "w");
    if (!residual.empty()) check_cpu_f32(residual, op, "residual");
    const int64_t cols = check_rows_linear_shapes(x, w, residual, y);
    const int64_t R = x.dim(0), K = x.dim(1);
    const float* px = x.f32();
    float* py = y.f32();
    parallel_for(ex, cols, R * cols * K > kParallelFlops, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c) {
            for (int64_t r = 0; r < R; ++r) {
                const float* xr = px + r * K;
                float out = 0.0f;
                switch (w.epilogue) {
                    case RowsEpilogue::store: {
                        int64_t seg = 0, n = c;  // column c of y: row n of weight seg
                        while (n >= w.w[seg].dim(0)) n -= w.w[seg++].dim(0);
                        out = dot(xr, w.w[seg].f32() + n * K, K);
                        break;
                    }
                    case RowsEpilogue::add:
                        out = residual.f32()[r * cols + c] + dot(xr, w.w[0].f32() + c * K, K);
                        break;
                    case RowsEpilogue::swiglu: {
                        const float g = dot(xr, w.w[0].f32() + c * K, K);
                        const float u = dot(xr, w.w[1].f32() + c * K, K);
                        out = silu(g) * u;
                        break;
                    }
                }
                py[r * cols + c] = out;
            }
        }
    });
}

void qk_norm_rope_cache(const Exec&, const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                        float eps, const Tensor& positions, const Tensor& inv_freq,
                        const Tensor& q_out, const Tensor& k_cache, const Tensor& v_cache,
                        const Tensor& row0) {
    const char* op = "qk_norm_rope_cache";
    for (const Tensor* t : {&qkv, &q_out, &k_cache, &v_cache, &inv_freq})
        check_cpu_f32(*t, op, "a tensor");
    if (!q_norm.empty()) check_cpu_f32(q_norm, op, "q_norm");
    if (!k_norm.empty()) check_cpu_f32(k_norm, op, "k_norm");
    check_qk_norm_rope_cache_shapes(qkv, q_norm, k_norm, eps, positions, inv_freq, q_out, k_cache,
                                    v_cache, row0);
    const int64_t R = q_out.dim(0), H = q_out.dim(1), Dh = q_out.dim(2), Hkv = k_cache.dim(1);
    const int64_t C = k_cache.dim(0), half = inv_freq.numel(), r0 = row0.i32()[0];
    const int64_t width = (H + 2 * Hkv) * Dh;
    const float* qn = q_norm.empty() ? nullptr : q_norm.f32();
    const float* kn = k_norm.empty() ? nullptr : k_norm.f32();
    std::vector<float> head(static_cast<size_t>(Dh));
    for (int64_t r = 0; r < R; ++r) {
        const float* in = qkv.f32() + r * width;
        const auto pos = static_cast<float>(positions.i32()[r]);
        const int64_t row = r0 + r;
        const bool cached = r0 >= 0 && row < C;
        for (int64_t h = 0; h < H + 2 * Hkv; ++h) {
            head.assign(in + h * Dh, in + (h + 1) * Dh);
            float* dst = nullptr;
            if (h < H) {
                norm_rope_head(head.data(), Dh, qn, eps, pos, inv_freq.f32(), half);
                dst = q_out.f32() + (r * H + h) * Dh;
            } else if (h < H + Hkv) {
                norm_rope_head(head.data(), Dh, kn, eps, pos, inv_freq.f32(), half);
                if (cached) dst = k_cache.f32() + (row * Hkv + (h - H)) * Dh;
            } else if (cached) {
                dst = v_cache.f32() + (row * Hkv + (h - H - Hkv)) * Dh;
            }
            if (dst != nullptr) std::copy(head.begin(), head.end(), dst);
        }
    }
}

}  // namespace dflash::cpu

// DFlash2's grouped dynamic causal convolution (docs/formats.md "DFlash2 drafter directory";
// semantics on Backend::dyn_conv_fwd) and its backward, in plain loops. Tested by
// tests/ops/dyn_conv_test.cpp.
#include <algorithm>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

// The pieces of one call: coefficient of tap t at output row r and channel c is
// base[half, t, c] + delta[r, (half*k + t)*G + c/S].
struct Conv {
    DynConvDims d;
    int64_t half, bs;
    const float* base;   // [2, k, D]
    const float* delta;  // [R, 2kG]
    float coef(int64_t r, int64_t t, int64_t c) const {
        return base[(half * d.k + t) * d.D + c] +
               delta[r * 2 * d.k * d.G + (half * d.k + t) * d.G + c / d.S];
    }
    // Taps that row r may use: t <= its in-block position (never across a block start).
    int64_t taps(int64_t r) const { return std::min(d.k, r % bs + 1); }
};

void check_inputs(const Tensor& x, const Tensor& base, const Tensor& delta, const Tensor& y,
                  const char* op) {
    check_cpu_f32(x, op, "x");
    check_cpu_f32(base, op, "base");
    check_cpu_f32(delta, op, "delta");
    check_cpu_f32(y, op, "output");
}

}  // namespace

void dyn_conv_fwd(const Exec& ex, const Tensor& x, const Tensor& base, const Tensor& delta,
                  int64_t half, int64_t block_size, const Tensor& y) {
    check_inputs(x, base, delta, y, "dyn_conv_fwd");
    const Conv cv{check_dyn_conv_fwd_shapes(x, base, delta, half, block_size, y), half, block_size,
                  base.f32(), delta.f32()};
    const int64_t D = cv.d.D;
    const float* xs = x.f32();
    float* ys = y.f32();
    parallel_for(ex, cv.d.R, cv.d.R * D > 16384, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < D; ++c) {
                float acc = 0.0f;
                for (int64_t t = 0; t < cv.taps(r); ++t)
                    acc += cv.coef(r, t, c) * xs[(r - t) * D + c];
                ys[r * D + c] = acc;
            }
    });
}

void dyn_conv_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& base,
                  const Tensor& delta, int64_t half, int64_t block_size, const Tensor& dx,
                  const Tensor& dbase, const Tensor& ddelta) {
    check_inputs(x, base, delta, dx, "dyn_conv_bwd");
    check_cpu_f32(dy, "dyn_conv_bwd", "dy");
    check_cpu_f32(dbase, "dyn_conv_bwd", "dbase");
    check_cpu_f32(ddelta, "dyn_conv_bwd", "ddelta");
    const Conv cv{
        check_dyn_conv_bwd_shapes(dy, x, base, delta, half, block_size, dx, dbase, ddelta), half,
        block_size, base.f32(), delta.f32()};
    const int64_t R = cv.d.R, D = cv.d.D, k = cv.d.k, G = cv.d.G, S = cv.d.S;
    const float* xs = x.f32();
    const float* g = dy.f32();
    // dx[r, c] = sum over the outputs r + t of the same block that read x[r, c] through tap t.
    float* dxs = dx.f32();
    parallel_for(ex, R, R * D > 16384, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t c = 0; c < D; ++c) {
                float acc = 0.0f;
                for (int64_t t = 0; t < k && r + t < R; ++t)
                    if (cv.taps(r + t) > t) acc += cv.coef(r + t, t, c) * g[(r + t) * D + c];
                dxs[r * D + c] = acc;
            }
    });
    // dbase: one channel per iteration, rows summed in order (deterministic).
    float* db = dbase.f32() + half * k * D;
    parallel_for(ex, D, R * D > 16384, [&](int64_t c0, int64_t c1) {
        for (int64_t c = c0; c < c1; ++c)
            for (int64_t t = 0; t < k; ++t) {
                float acc = 0.0f;
                for (int64_t r = 0; r < R; ++r)
                    if (cv.taps(r) > t) acc += g[r * D + c] * xs[(r - t) * D + c];
                db[t * D + c] += acc;
            }
    });
    // ddelta: the group sums of the same products, zero for taps a row may not use.
    float* dd = ddelta.f32();
    parallel_for(ex, R, R * D > 16384, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
            for (int64_t t = 0; t < k; ++t)
                for (int64_t gi = 0; gi < G; ++gi) {
                    float acc = 0.0f;
                    if (cv.taps(r) > t)
                        for (int64_t c = gi * S; c < (gi + 1) * S; ++c)
                            acc += g[r * D + c] * xs[(r - t) * D + c];
                    dd[r * 2 * k * G + (half * k + t) * G + gi] = acc;
                }
    });
}

}  // namespace dflash::cpu

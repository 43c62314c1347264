// Helpers shared by the GEMM, LM-head and loss-stats CUDA tests (tests/cuda/gemm_cuda_test.cpp,
// lm_head_ce_cuda_test.cpp, loss_stats_cuda_test.cpp): bf16-exact random inputs, NaN poison, and
// a comparison that reports everything one GPU run needs to find a bug (relative error norm, max
// abs error and where, first non-finite element, first element over the tolerance).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/device_tensor.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace dflash::test {

// N(0, scale²) values already rounded to bf16, so the CPU reference (f32) and the GPU (bf16) see
// the same numbers.
inline HostTensor bf16_random(Shape shape, Rng& rng, float scale = 1.0f) {
    HostTensor t(shape, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i)
        t.f32()[i] = bf16_to_f32(f32_to_bf16(rng.normal() * scale));
    return t;
}

inline HostTensor nan_tensor(Shape shape) {
    HostTensor t(shape, DType::f32);
    fill_f32(t, std::numeric_limits<float>::quiet_NaN());
    return t;
}

// Rounds every element of an f32 host tensor to bf16 (what a bf16 output can hold at best).
inline void round_to_bf16(const Tensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = bf16_to_f32(f32_to_bf16(t.f32()[i]));
}

struct Diff {
    double rel_norm = 0;  // ‖got − ref‖ / ‖ref‖ (‖got − ref‖ when ref is 0)
    double max_abs = 0;   // max |got − ref|
    double max_ref = 0;   // max |ref|
    int64_t worst = -1;   // index of max_abs
    int64_t first_nonfinite = -1;
    int64_t first_over = -1;  // first index with |got − ref| > tol_abs
    float got_at_first = 0, ref_at_first = 0;
    int64_t n = 0;

    bool ok(double tol_rel, double tol_abs) const {
        return first_nonfinite < 0 && rel_norm <= tol_rel && max_abs <= tol_abs;
    }
    std::string str() const {
        std::ostringstream s;
        s << "n=" << n << " rel_norm=" << rel_norm << " max_abs=" << max_abs << " at " << worst
          << " (max|ref|=" << max_ref << ")";
        if (first_nonfinite >= 0) s << " first non-finite at " << first_nonfinite;
        if (first_over >= 0)
            s << " first over tolerance at " << first_over << ": got " << got_at_first << " want "
              << ref_at_first;
        return s.str();
    }
};

// got and ref: f32 host tensors of equal numel. tol_abs only marks first_over.
inline Diff compare(const Tensor& got, const Tensor& ref, double tol_abs) {
    Diff d;
    d.n = ref.numel();
    EXPECT_EQ(got.numel(), ref.numel());
    double num = 0, den = 0;
    for (int64_t i = 0; i < std::min(got.numel(), ref.numel()); ++i) {
        const double g = got.f32()[i], r = ref.f32()[i];
        if (!std::isfinite(g) && d.first_nonfinite < 0) d.first_nonfinite = i;
        const double e = std::fabs(g - r);
        num += std::isfinite(e) ? e * e : 0.0;
        den += r * r;
        d.max_ref = std::max(d.max_ref, std::fabs(r));
        if (std::isfinite(e) && e > d.max_abs) d.max_abs = e, d.worst = i;
        if ((!(e <= tol_abs)) && d.first_over < 0) {
            d.first_over = i;
            d.got_at_first = static_cast<float>(g);
            d.ref_at_first = static_cast<float>(r);
        }
    }
    d.rel_norm = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    return d;
}

// A device tensor of `dtype` holding the f32 host values (rounded to bf16 when dtype is bf16).
inline DeviceTensor to_device(Backend& be, const HostTensor& host, DType dtype) {
    DeviceTensor t(be, host.shape(), dtype);
    from_host_f32(be, t, host);
    return t;
}

}  // namespace dflash::test

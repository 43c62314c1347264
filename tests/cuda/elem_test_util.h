// Helpers of the element-wise CUDA op tests (tests/cuda/{copy,embedding,rmsnorm,rope,swiglu,
// elementwise,adamw}_cuda_test.cpp and cuda_backend_test.cpp): the CPU and CUDA backends side by
// side, bf16-rounded random inputs (so the fp32 CPU reference sees exactly the GPU's values),
// uploads, NaN poisoning of outputs, and comparisons whose failure message says where and by how
// much (the GPU runs are batched: one run must reveal every bug).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/device_tensor.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace dflash::test {

#define REQUIRE_CUDA_DEVICE()                     \
    do {                                          \
        if (::dflash::cuda_device_count() == 0) { \
            GTEST_SKIP() << "no CUDA device";     \
        }                                         \
    } while (0)

struct Backends {
    std::unique_ptr<Backend> cpu = make_cpu_backend(1);
    std::unique_ptr<Backend> gpu = make_backend(DeviceKind::cuda, 0, 1);
};

// Base of a test suite that compares the CUDA backend with the CPU one; skips visibly without a
// GPU.
class CudaVsCpu : public ::testing::Test {
  protected:
    void SetUp() override {
        if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
        be_ = std::make_unique<Backends>();
    }
    Backend& cpu() { return *be_->cpu; }
    Backend& gpu() { return *be_->gpu; }
    std::unique_ptr<Backends> be_;
};

inline float round_bf16(float x) {
    return bf16_to_f32(f32_to_bf16(x));
}

// N(0, scale^2) values rounded to bf16.
inline HostTensor bf16_values(Shape shape, Rng& rng, float scale = 1.0f) {
    HostTensor t(shape, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = round_bf16(scale * rng.normal());
    return t;
}

// N(0, scale^2) f32 values (inputs that stay f32 on the GPU: masters, moments, gradients).
inline HostTensor f32_values(Shape shape, Rng& rng, float scale = 1.0f) {
    HostTensor t(shape, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = scale * rng.normal();
    return t;
}

inline HostTensor clone_rounded_bf16(const HostTensor& t) {
    HostTensor r = t.clone();
    for (int64_t i = 0; i < r.numel(); ++i) r.f32()[i] = round_bf16(r.f32()[i]);
    return r;
}

// Host f32 values on the GPU as `dtype` (f32 or bf16).
inline DeviceTensor to_gpu(Backend& gpu, const HostTensor& h, DType dtype) {
    DeviceTensor d(gpu, h.shape(), dtype);
    from_host_f32(gpu, d, h);
    return d;
}

inline DeviceTensor to_gpu_i32(Backend& gpu, const HostTensor& ids) {
    DeviceTensor d(gpu, ids.shape(), DType::i32);
    gpu.upload(d, ids);
    gpu.synchronize();
    return d;
}

inline HostTensor to_cpu(Backend& gpu, const Tensor& t) {
    return to_host_f32(gpu, t);
}

// Every element NaN, so an element the op fails to write fails the comparison.
inline void poison(Backend& gpu, const Tensor& t) {
    gpu.fill(t, std::nanf(""));
}

// Tolerances of one comparison: element i is bad when |got - ref| > atol + rtol |ref| (or got is
// NaN where ref is not); the whole output fails when any element is bad or when
// ||got - ref|| / ||ref|| > rel_norm.
struct Tol {
    double rel_norm;
    double rtol;
    double atol;
};

// bf16 outputs from fp32 math: one bf16 rounding (2^-9 relative) plus a little fp32 noise.
inline Tol bf16_tol(double atol) {
    return {1e-2, 1.0 / 256, atol};
}

inline double max_abs(const Tensor& t) {
    double m = 0;
    for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(double(t.f32()[i])));
    return m;
}

// Empty string when got matches ref within tol, else a diagnosis: relative error norm, worst
// element, first bad element with its values, NaN count.
inline std::string mismatch(const Tensor& got, const Tensor& ref, const Tol& tol) {
    std::ostringstream out;
    if (got.numel() != ref.numel()) {
        out << "element counts differ: got " << got.describe() << " ref " << ref.describe();
        return out.str();
    }
    double num = 0, den = 0, worst = 0;
    int64_t worst_i = -1, first_bad = -1, nans = 0, bad = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) {
        const double g = got.f32()[i], r = ref.f32()[i];
        if (std::isnan(g) && !std::isnan(r)) ++nans;
        const double d =
            std::isnan(g) != std::isnan(r) ? INFINITY : (std::isnan(r) ? 0 : std::fabs(g - r));
        if (std::isfinite(d)) num += d * d;
        if (std::isfinite(r)) den += r * r;
        if (d > worst || (worst_i < 0 && d > 0)) {
            worst = d;
            worst_i = i;
        }
        if (d > tol.atol + tol.rtol * std::fabs(r)) {
            ++bad;
            if (first_bad < 0) first_bad = i;
        }
    }
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    if (bad == 0 && nans == 0 && rel <= tol.rel_norm) return "";
    out << "rel error norm " << rel << " (tol " << tol.rel_norm << "), " << bad << " of "
        << ref.numel() << " elements outside atol " << tol.atol << " + rtol " << tol.rtol
        << " |ref|, " << nans << " NaN";
    if (first_bad >= 0)
        out << "; first bad [" << first_bad << "] got " << got.f32()[first_bad] << " ref "
            << ref.f32()[first_bad];
    if (worst_i >= 0)
        out << "; worst [" << worst_i << "] got " << got.f32()[worst_i] << " ref "
            << ref.f32()[worst_i] << " |diff| " << worst;
    return out.str();
}

// Same bits (NaNs compared by bits too); names the first differing element.
inline std::string bit_mismatch(const Tensor& got, const Tensor& ref) {
    std::ostringstream out;
    if (got.nbytes() != ref.nbytes() || got.dtype() != ref.dtype()) {
        out << "got " << got.describe() << " ref " << ref.describe();
        return out.str();
    }
    const size_t es = dtype_size(got.dtype());
    const auto* g = static_cast<const unsigned char*>(got.data());
    const auto* r = static_cast<const unsigned char*>(ref.data());
    int64_t first = -1, count = 0;
    for (int64_t i = 0; i < got.numel(); ++i) {
        if (std::memcmp(g + i * es, r + i * es, es) != 0) {
            if (first < 0) first = i;
            ++count;
        }
    }
    if (count == 0) return "";
    uint32_t gb = 0, rb = 0;
    std::memcpy(&gb, g + first * es, es);
    std::memcpy(&rb, r + first * es, es);
    out << count << " of " << got.numel() << " elements differ; first [" << first << "] got bits 0x"
        << std::hex << gb << " ref bits 0x" << rb << std::dec;
    if (got.dtype() == DType::f32) {
        float gf, rf;
        std::memcpy(&gf, &gb, 4);
        std::memcpy(&rf, &rb, 4);
        out << " (" << gf << " vs " << rf << ")";
    }
    return out.str();
}

// Units in the last place between two floats of one sign (for the AdamW comparison).
inline int64_t ulp_distance(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b) ? 0 : INT64_MAX;
    int32_t ia, ib;
    std::memcpy(&ia, &a, 4);
    std::memcpy(&ib, &b, 4);
    if (ia < 0) ia = INT32_MIN - ia;
    if (ib < 0) ib = INT32_MIN - ib;
    return std::llabs(static_cast<int64_t>(ia) - ib);
}

}  // namespace dflash::test

// The counter-based random numbers of add_uniform_noise and fill_normal (backend/op_list.h):
// element i of a call with a 64-bit seed gets u = uniform_hash01(seed, i) in [0, 1), or
// z = normal_hash(seed, i) ~ N(0, 1), a pure function of (seed, i), so the CPU and CUDA ops draw
// the same numbers, in any order and on any thread, with no generator state to carry between steps.
// Code shared by the CPU ops and the CUDA kernels (__host__ __device__), no CUDA headers. Tested by
// tests/ops/uniform_noise_test.cpp and tests/ops/normal_fill_test.cpp.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DF_NOISE_HD __host__ __device__ __forceinline__
#else
#define DF_NOISE_HD inline
#endif

namespace dflash {

// SplitMix64's finaliser: a bijection on 64-bit words whose output bits all depend on every input
// bit, enough to decorrelate consecutive counters.
DF_NOISE_HD uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

// u in [0, 1) with 24 random bits (exact in f32).
DF_NOISE_HD float uniform_hash01(uint64_t seed, uint64_t i) {
    const uint64_t h = mix64(mix64(seed) + i * 0x9e3779b97f4a7c15ULL);
    return static_cast<float>(h >> 40) * (1.0f / 16777216.0f);
}

// ---- normal_hash -------------------------------------------------------------------------------
// Box-Muller from two 53-bit uniforms, with a logarithm, cosine and sine of our own made of
// correctly rounded double operations only (+, -, *, /, sqrt): the math libraries' log and cos
// differ between glibc and CUDA in the last bit, and nvcc would fuse a multiply and an add into one
// FMA (one rounding where the host rounds twice; the host compiles ISO C++, -ffp-contract=off).
// So the host and the device compute the very same bits. The series are cut where their error is
// far below a float's (1e-12 relative), since the numbers end as floats.
namespace noise_detail {

DF_NOISE_HD double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dmul_rn(a, b);
#else
    return a * b;
#endif
}
DF_NOISE_HD double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __dadd_rn(a, b);
#else
    return a + b;
#endif
}
DF_NOISE_HD double ddiv(double a, double b) {
#if defined(__CUDA_ARCH__)
    return __ddiv_rn(a, b);
#else
    return a / b;
#endif
}
DF_NOISE_HD double dsqrt(double a) {
#if defined(__CUDA_ARCH__)
    return __dsqrt_rn(a);
#else
    return __builtin_sqrt(a);
#endif
}
DF_NOISE_HD uint64_t double_bits(double d) {
#if defined(__CUDA_ARCH__)
    return static_cast<uint64_t>(__double_as_longlong(d));
#else
    uint64_t u;
    __builtin_memcpy(&u, &d, sizeof u);
    return u;
#endif
}
DF_NOISE_HD double bits_double(uint64_t u) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double(static_cast<long long>(u));
#else
    double d;
    __builtin_memcpy(&d, &u, sizeof d);
    return d;
#endif
}

// ln(m / 2^53) for m in [1, 2^53]. m = f 2^e with f in [sqrt(1/2), sqrt(2)] (read off the bits
// of the exact double m), ln f = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...) with
// s = (f - 1)/(f + 1), |s| < 0.172: eight terms leave a relative error below 1e-13.
DF_NOISE_HD double log_u53(uint64_t m) {
    const uint64_t b = double_bits(static_cast<double>(m));
    int e = static_cast<int>(b >> 52) - 1023;
    double f = bits_double((b & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL);  // [1, 2)
    if (f > 1.4142135623730951) {
        f = dmul(f, 0.5);
        ++e;
    }
    const double s = ddiv(dadd(f, -1.0), dadd(f, 1.0));  // f - 1 is exact (Sterbenz)
    const double z = dmul(s, s);
    double p = 1.0 / 15;
    p = dadd(dmul(p, z), 1.0 / 13);
    p = dadd(dmul(p, z), 1.0 / 11);
    p = dadd(dmul(p, z), 1.0 / 9);
    p = dadd(dmul(p, z), 1.0 / 7);
    p = dadd(dmul(p, z), 1.0 / 5);
    p = dadd(dmul(p, z), 1.0 / 3);
    p = dadd(dmul(p, z), 1.0);
    return dadd(dmul(static_cast<double>(e - 53), 0.6931471805599453), dmul(dmul(2.0, s), p));
}

// cos(x) and sin(x) for 0 <= x <= pi/4 by their Taylor series in w = -x^2, to x^12 and x^13
// (remainders below 1e-12). The coefficients 1/n! are folded at compile time (n! is exact in
// double), rounded to nearest by both compilers.
DF_NOISE_HD double cos_small(double x) {
    const double w = -dmul(x, x);
    double p = 1.0 / 479001600.0;           // 1/12!
    p = dadd(dmul(p, w), 1.0 / 3628800.0);  // 1/10!
    p = dadd(dmul(p, w), 1.0 / 40320.0);    // 1/8!
    p = dadd(dmul(p, w), 1.0 / 720.0);
    p = dadd(dmul(p, w), 1.0 / 24.0);
    p = dadd(dmul(p, w), 0.5);
    return dadd(dmul(p, w), 1.0);
}
DF_NOISE_HD double sin_small(double x) {
    const double w = -dmul(x, x);
    double p = 1.0 / 6227020800.0;           // 1/13!
    p = dadd(dmul(p, w), 1.0 / 39916800.0);  // 1/11!
    p = dadd(dmul(p, w), 1.0 / 362880.0);    // 1/9!
    p = dadd(dmul(p, w), 1.0 / 5040.0);
    p = dadd(dmul(p, w), 1.0 / 120.0);
    p = dadd(dmul(p, w), 1.0 / 6.0);
    return dmul(x, dadd(dmul(p, w), 1.0));
}

// cos(2 pi a) and sin(2 pi a) for a = m / 2^53 in [0, 1): a = q/4 + r with the quadrant q and
// r in [0, 1/4) (exact), and the angle 2 pi r folded onto [0, pi/4] (1/4 - r is exact too).
DF_NOISE_HD void sincos_2pi(double a, double* c, double* s) {
    constexpr double kTwoPi = 6.283185307179586;
    const int q = static_cast<int>(dmul(a, 4.0));
    const double r = dadd(a, -0.25 * q);
    double cr, sr;  // cos and sin of 2 pi r
    if (r <= 0.125) {
        cr = cos_small(dmul(kTwoPi, r));
        sr = sin_small(dmul(kTwoPi, r));
    } else {
        const double x = dmul(kTwoPi, dadd(0.25, -r));
        cr = sin_small(x);
        sr = cos_small(x);
    }
    // The angle is q pi/2 + 2 pi r.
    *c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
    *s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
}

}  // namespace noise_detail

// Standard normal numbers, a pure function of (seed, element): elements 2k and 2k + 1 are the
// pair r cos(2 pi u2), r sin(2 pi u2), r = sqrt(-2 ln u1), of the 53-bit uniforms u1 in (0, 1]
// and u2 in [0, 1) of counters 2k and 2k + 1 (|z| < 8.6). normal_hash_pair gives both (what a
// loop over consecutive elements calls), normal_hash one.
DF_NOISE_HD void normal_hash_pair(uint64_t seed, uint64_t k, float* even, float* odd) {
    using namespace noise_detail;
    const uint64_t base = mix64(seed);
    const uint64_t h1 = mix64(base + (2 * k) * 0x9e3779b97f4a7c15ULL);
    const uint64_t h2 = mix64(base + (2 * k + 1) * 0x9e3779b97f4a7c15ULL);
    const double r = dsqrt(dmul(-2.0, log_u53((h1 >> 11) + 1)));
    double c, s;
    sincos_2pi(dmul(static_cast<double>(h2 >> 11), 1.0 / 9007199254740992.0), &c, &s);  // exact
    *even = static_cast<float>(dmul(r, c));
    *odd = static_cast<float>(dmul(r, s));
}

DF_NOISE_HD float normal_hash(uint64_t seed, uint64_t i) {
    float even, odd;
    normal_hash_pair(seed, i / 2, &even, &odd);
    return (i & 1) != 0 ? odd : even;
}

}  // namespace dflash

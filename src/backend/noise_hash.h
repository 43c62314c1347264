// The counter-based uniform numbers of add_uniform_noise (backend/op_list.h): element i of a call
// with a 64-bit seed gets u = uniform_hash01(seed, i) in [0, 1), a pure function of (seed, i), so
// the CPU and CUDA ops draw the same numbers, in any order and on any thread, with no generator
// state to carry between steps. Plain integer code shared by the CPU op and the CUDA kernel
// (__host__ __device__), no CUDA headers. Tested by tests/ops/uniform_noise_test.cpp.
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

}  // namespace dflash

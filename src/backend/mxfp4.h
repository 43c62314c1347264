// MXFP4 (docs/formats.md "Mixture-of-experts targets"): 4-bit e2m1 values in groups of 32 that
// share one e8m0 scale byte, how gpt-oss checkpoints store their experts. The host decoder used
// by the loader (model/expert_weights.cpp) and by the CPU moe_experts op, which decodes MXFP4
// experts on the fly (backend/cpu/moe.cpp); the CUDA kernels decode in their weight-tile loads
// with kernels/moe.h: mxfp4_bf16, which gives the same numbers. Tested by
// tests/model/moe_loading_test.cpp and tests/ops/moe_test.cpp.
#pragma once

#include <cstdint>
#include <span>

namespace dflash {

// The value of a 4-bit e2m1 code: bits 0-2 pick 0, 0.5, 1, 1.5, 2, 3, 4 or 6, bit 3 the sign.
float e2m1_value(uint8_t code);

// MXFP4 rows into f32: `rows` rows of `groups` groups of 32 values, each group 16 bytes of blocks
// (byte j: element 2j in the low nibble, 2j+1 in the high one) times 2^(scale - 127) from one
// scale byte. blocks [rows, groups, 16], scales [rows, groups], out [rows, groups * 32]. Every
// value is exact in f32 (and in bf16): at most two significant bits, an exponent in range or
// overflowing to infinity.
void decode_mxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, int64_t rows,
                  int64_t groups, float* out);

}  // namespace dflash

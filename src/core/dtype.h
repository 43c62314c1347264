// Element types and bf16 conversion (round-to-nearest-even). Tested by tests/core/tensor_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace dflash {

// u8: raw bytes (MXFP4 expert blocks and scales, docs/formats.md); no arithmetic op takes it.
enum class DType : uint8_t { f32, bf16, i32, u8 };

constexpr size_t dtype_size(DType t) {
    switch (t) {
        case DType::f32:
            return 4;
        case DType::bf16:
            return 2;
        case DType::i32:
            return 4;
        case DType::u8:
            return 1;
    }
    return 0;
}

constexpr std::string_view dtype_name(DType t) {
    switch (t) {
        case DType::f32:
            return "f32";
        case DType::bf16:
            return "bf16";
        case DType::i32:
            return "i32";
        case DType::u8:
            return "u8";
    }
    return "?";
}

// bf16 is the upper half of an IEEE float32. Conversion rounds to nearest, ties to even; NaN stays
// NaN (quiet), infinities stay infinite.
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
    const uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>((u + rounding) >> 16);
}

inline float bf16_to_f32(uint16_t h) {
    const uint32_t u = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// IEEE half precision -> float (safetensors F16 files are read into f32 on the CPU).
float f16_to_f32(uint16_t h);

}  // namespace dflash

// Half-precision decoding. Tested by tests/core/tensor_test.cpp.
#include "core/dtype.h"

#include <cmath>

namespace dflash {

float f16_to_f32(uint16_t h) {
    const uint32_t sign = (h >> 15) & 1u;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t mant = h & 0x3ffu;
    float value;
    if (exp == 0) {
        value = std::ldexp(static_cast<float>(mant), -24);  // subnormal (or zero)
    } else if (exp == 31) {
        value = mant ? std::nanf("") : INFINITY;
    } else {
        value = std::ldexp(static_cast<float>(mant | 0x400u), static_cast<int>(exp) - 25);
    }
    return sign ? -value : value;
}

}  // namespace dflash

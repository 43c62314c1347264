// The host MXFP4 decoder (backend/mxfp4.h). Tested by tests/model/moe_loading_test.cpp and
// tests/ops/moe_test.cpp.
#include "backend/mxfp4.h"

#include <cmath>

#include "core/error.h"

namespace dflash {

float e2m1_value(uint8_t code) {
    constexpr float kMagnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};
    const float m = kMagnitude[code & 7];
    return (code & 8) ? -m : m;
}

void decode_mxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, int64_t rows,
                  int64_t groups, float* out) {
    DF_ASSERT(static_cast<int64_t>(blocks.size()) == rows * groups * 16 &&
                  static_cast<int64_t>(scales.size()) == rows * groups,
              "MXFP4: {} block bytes and {} scale bytes for {} rows of {} groups", blocks.size(),
              scales.size(), rows, groups);
    for (int64_t g = 0; g < rows * groups; ++g) {
        const int exponent = static_cast<int>(scales[g]) - 127;
        float* o = out + g * 32;
        for (int64_t j = 0; j < 16; ++j) {
            const uint8_t byte = blocks[g * 16 + j];
            o[2 * j] = std::ldexp(e2m1_value(byte & 0x0f), exponent);
            o[2 * j + 1] = std::ldexp(e2m1_value(byte >> 4), exponent);
        }
    }
}

}  // namespace dflash

// FNV-1a 64 (core/hash.h). Tested by tests/core/hash_test.cpp.
#include "core/hash.h"

namespace dflash {

namespace {
uint64_t mix(uint64_t h, uint8_t byte) {
    return (h ^ byte) * kFnv1a64Prime;
}
}  // namespace

uint64_t fnv1a64(std::span<const uint8_t> bytes, uint64_t h) {
    for (const uint8_t b : bytes) h = mix(h, b);
    return h;
}

uint64_t fnv1a64(std::string_view text, uint64_t h) {
    for (const char c : text) h = mix(h, static_cast<uint8_t>(c));
    return h;
}

uint64_t fnv1a64_u64(uint64_t v, uint64_t h) {
    for (int i = 0; i < 8; ++i) h = mix(h, static_cast<uint8_t>(v >> (8 * i)));
    return h;
}

}  // namespace dflash

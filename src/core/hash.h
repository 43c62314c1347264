// FNV-1a 64: the one non-cryptographic hash of the project. Its values are recorded on disk (the
// settings hash in a run directory, compared on --resume; the tokenizer's name; shard checksums,
// docs/data.md), so they must never change. Tested by tests/core/hash_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

namespace dflash {

inline constexpr uint64_t kFnv1a64Offset = 0xcbf29ce484222325ull;  // the offset basis
inline constexpr uint64_t kFnv1a64Prime = 0x100000001b3ull;

// FNV-1a 64 of `bytes`, continuing from `h`: start from kFnv1a64Offset, or pass a previous result
// to hash several pieces as one run of bytes.
uint64_t fnv1a64(std::span<const uint8_t> bytes, uint64_t h = kFnv1a64Offset);
// The same over the bytes of `text`.
uint64_t fnv1a64(std::string_view text, uint64_t h = kFnv1a64Offset);
// The same over the 8 bytes of `v`, least significant first (so the same on every host).
uint64_t fnv1a64_u64(uint64_t v, uint64_t h);

}  // namespace dflash

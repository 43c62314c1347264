// SHA-256 and HMAC-SHA256, written here so that the rendezvous of a multi-process run
// (comm/tcp_group.h) can check a peer's knowledge of the launch secret without linking a crypto
// library. Used only for that keyed challenge-response; not a general crypto toolkit. Tested
// against the published SHA-256 examples and the RFC 4231 HMAC vectors by
// tests/comm/sha256_test.cpp.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace dflash {

using Sha256Digest = std::array<uint8_t, 32>;

// Incremental hash: add() any number of times, then finish() once.
class Sha256 {
  public:
    Sha256();
    void add(const void* data, size_t bytes);
    void add(std::string_view s) { add(s.data(), s.size()); }
    Sha256Digest finish();

  private:
    void compress(const uint8_t* block);
    std::array<uint32_t, 8> state_;
    std::array<uint8_t, 64> block_{};
    size_t block_used_ = 0;
    uint64_t total_bytes_ = 0;
};

Sha256Digest sha256(std::string_view data);

// Keyed digest (HMAC with SHA-256) of `message` under `key`; any key length.
Sha256Digest hmac_sha256(std::string_view key, std::string_view message);

// Equality that takes the same time wherever the first difference is, so that a peer timing the
// comparison learns nothing about the expected digest.
bool same_digest(const Sha256Digest& a, const Sha256Digest& b);

// Lower-case hex, two digits a byte (tests and messages).
std::string to_hex(const Sha256Digest& d);

}  // namespace dflash

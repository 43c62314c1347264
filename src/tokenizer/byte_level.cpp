// GPT-2's byte-to-Unicode table, computed at compile time. Tested by
// tests/tokenizer/byte_level_test.cpp.
#include "tokenizer/byte_level.h"

#include <array>

namespace dflash {

namespace {

constexpr bool prints_as_itself(int b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> make_table() {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) t[b] = prints_as_itself(b) ? static_cast<char32_t>(b) : next++;
    return t;
}

constexpr std::array<char32_t, 256> kByteToCode = make_table();
constexpr char32_t kMaxCode = 256 + 68;  // one past the largest code point in the table

constexpr std::array<int16_t, kMaxCode> make_inverse() {
    std::array<int16_t, kMaxCode> inv{};
    for (auto& x : inv) x = -1;
    for (int b = 0; b < 256; ++b) inv[kByteToCode[b]] = static_cast<int16_t>(b);
    return inv;
}

constexpr std::array<int16_t, kMaxCode> kCodeToByte = make_inverse();

}  // namespace

char32_t byte_level_code_point(uint8_t b) {
    return kByteToCode[b];
}

std::string byte_level_encode(std::string_view bytes) {
    std::string out;
    out.reserve(bytes.size() * 2);
    for (char c : bytes) {
        const char32_t cp = kByteToCode[static_cast<uint8_t>(c)];
        if (cp < 0x80) {
            out.push_back(static_cast<char>(cp));
        } else {  // every code point of the table is below U+0800: two bytes
            out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        }
    }
    return out;
}

std::optional<std::string> byte_level_decode(std::string_view chars) {
    std::string out;
    out.reserve(chars.size());
    for (size_t i = 0; i < chars.size();) {
        const auto b0 = static_cast<uint8_t>(chars[i]);
        char32_t cp = 0;
        if (b0 < 0x80) {
            cp = b0;
            i += 1;
        } else if ((b0 & 0xE0) == 0xC0 && i + 1 < chars.size() &&
                   (static_cast<uint8_t>(chars[i + 1]) & 0xC0) == 0x80) {
            cp = (static_cast<char32_t>(b0 & 0x1F) << 6) |
                 (static_cast<uint8_t>(chars[i + 1]) & 0x3F);
            i += 2;
        } else {
            return std::nullopt;  // three- and four-byte characters are outside the alphabet
        }
        if (cp >= kMaxCode || kCodeToByte[cp] < 0) return std::nullopt;
        out.push_back(static_cast<char>(kCodeToByte[cp]));
    }
    return out;
}

}  // namespace dflash

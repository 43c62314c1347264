// GPT-2's byte-level alphabet, which byte-level BPE vocabularies (Qwen2/Qwen3, Llama-3, GPT-2)
// are written in: every byte is one printable Unicode character. The printable bytes '!'..'~',
// U+00A1..U+00AC and U+00AE..U+00FF stand for themselves; the other 68 bytes, in increasing order,
// become U+0100, U+0101, ... (so a space is 'Ġ' U+0120 and a newline 'Ċ' U+010A).
// Tested by tests/tokenizer/byte_level_test.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dflash {

// The code point that byte `b` is written as.
char32_t byte_level_code_point(uint8_t b);
// `bytes` with every byte replaced by its character (UTF-8).
std::string byte_level_encode(std::string_view bytes);
// The bytes a vocabulary string stands for; nullopt when it holds a character outside the
// alphabet or is not valid UTF-8.
std::optional<std::string> byte_level_decode(std::string_view chars);

}  // namespace dflash

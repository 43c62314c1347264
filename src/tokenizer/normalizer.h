// Unicode NFC, the normalizer of Qwen2/Qwen3 tokenizers (Llama-3 has none), through utf8proc, with
// a map from each output byte back to the input, so that tokens can be traced to the text they
// came from (the loss mask of a chat follows the message each token belongs to).
// Tested by tests/tokenizer/normalizer_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dflash {

struct NormalizedText {
    std::string text;
    // source[i] = offset in the input of output byte i; source[text.size()] = input size. Empty
    // when the text did not change (the identity map).
    std::vector<uint32_t> source;

    size_t to_input(size_t i) const { return source.empty() ? i : source[i]; }
};

// NFC of `s` (valid UTF-8). The text is normalized in stretches that each start at an ASCII
// character: no ASCII character composes with what precedes it or reorders with anything, so
// NFC(a + b) = NFC(a) + NFC(b) at such a cut. Within a stretch that changes, every output byte
// maps to the stretch's first input byte.
NormalizedText nfc_normalize(std::string_view s);

}  // namespace dflash

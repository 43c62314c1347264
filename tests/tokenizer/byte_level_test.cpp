// GPT-2's byte-level alphabet: 256 distinct printable characters, the published anchors (space is
// U+0120 'Ġ', newline U+010A 'Ċ'), and decode inverting encode.
#include "tokenizer/byte_level.h"
#include "support/test_util.h"

#include <set>

namespace dflash {
namespace {

TEST(ByteLevel, TableIsTheGpt2One) {
    std::set<char32_t> seen;
    for (int b = 0; b < 256; ++b) seen.insert(byte_level_code_point(static_cast<uint8_t>(b)));
    EXPECT_EQ(seen.size(), 256u);
    EXPECT_EQ(byte_level_code_point(' '), U'\u0120');
    EXPECT_EQ(byte_level_code_point('\n'), U'\u010A');
    EXPECT_EQ(byte_level_code_point(0), U'\u0100');
    EXPECT_EQ(byte_level_code_point('A'), U'A');
    EXPECT_EQ(byte_level_code_point(0xAD), U'\u0143');  // soft hyphen is not printable
    EXPECT_EQ(byte_level_code_point(0xFF), U'\u00FF');
    EXPECT_EQ(byte_level_encode(" Hi\n"), "\xC4\xA0Hi\xC4\x8A");
}

TEST(ByteLevel, DecodeInvertsEncode) {
    std::string all;
    for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
    EXPECT_EQ(byte_level_decode(byte_level_encode(all)), all);
    EXPECT_EQ(byte_level_decode("\xC4\xA0world"), " world");
    EXPECT_FALSE(byte_level_decode("\xE4\xBD\xA0").has_value());  // a CJK character
    EXPECT_FALSE(byte_level_decode(" ").has_value());             // a raw space is not used
    EXPECT_FALSE(byte_level_decode("\xC4").has_value());          // truncated
}

}  // namespace
}  // namespace dflash

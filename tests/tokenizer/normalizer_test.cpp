// NFC through utf8proc: composition, Hangul, idempotence, and the map from normalized bytes back
// to the input (identity for unchanged text, the stretch start inside a changed stretch).
#include "tokenizer/normalizer.h"
#include "support/test_util.h"

namespace dflash {
namespace {

TEST(Normalizer, ComposesAndMapsBack) {
    const NormalizedText n = nfc_normalize("cafe\u0301 x");
    EXPECT_EQ(n.text, "caf\u00e9 x");
    ASSERT_EQ(n.source.size(), n.text.size() + 1);
    EXPECT_EQ(n.to_input(0), 0u);
    EXPECT_EQ(n.to_input(3), 3u);  // both bytes of é come from the stretch "e\u0301"
    EXPECT_EQ(n.to_input(4), 3u);
    EXPECT_EQ(n.to_input(5), 6u);  // the space after it
    EXPECT_EQ(n.to_input(n.text.size()), 8u);
}

TEST(Normalizer, UnchangedTextHasTheIdentityMap) {
    for (std::string s : {"plain ascii", "caf\u00e9 \u4f60\u597d \U0001F600", ""}) {
        const NormalizedText n = nfc_normalize(s);
        EXPECT_EQ(n.text, s);
        EXPECT_TRUE(n.source.empty());
        EXPECT_EQ(n.to_input(s.size()), s.size());
    }
}

TEST(Normalizer, HangulSingletonsAndIdempotence) {
    EXPECT_EQ(nfc_normalize("\u1100\u1161\u11a8").text, "\uac01");  // jamo -> syllable
    EXPECT_EQ(nfc_normalize("\u212b").text, "\u00c5");              // Angstrom sign -> Å
    EXPECT_EQ(nfc_normalize("A\u0308\u0301").text, "\u00c4\u0301");
    const std::string once = nfc_normalize("e\u0301\u0323 o\u0308").text;
    EXPECT_EQ(nfc_normalize(once).text, once);
}

// What the Qwen3.5 fixture's NFC cases lean on: marks put in canonical order before they compose
// (either order of a dot below and a circumflex gives the same letter), a composition exclusion
// stays decomposed, a Hangul LV syllable takes a trailing jamo, the Ohm sign is a singleton, and
// a compatibility ligature is left alone (NFC, not NFKC).
TEST(Normalizer, ReordersExcludesAndKeepsCompatibilityForms) {
    EXPECT_EQ(nfc_normalize("a\u0323\u0302").text, "\u1ead");
    EXPECT_EQ(nfc_normalize("a\u0302\u0323").text, "\u1ead");
    EXPECT_EQ(nfc_normalize("\u0958").text, "\u0915\u093c");
    EXPECT_EQ(nfc_normalize("\u0915\u093c").text, "\u0915\u093c");
    EXPECT_EQ(nfc_normalize("\uac00\u11a8").text, "\uac01");
    EXPECT_EQ(nfc_normalize("\u2126").text, "\u03a9");
    EXPECT_EQ(nfc_normalize("\ufb01").text, "\ufb01");
    // A mark composes with the ASCII letter before it (where normalizer.cpp's stretch starts).
    EXPECT_EQ(nfc_normalize("xe\u0301\u0301").text, "x\u00e9\u0301");
}

}  // namespace
}  // namespace dflash

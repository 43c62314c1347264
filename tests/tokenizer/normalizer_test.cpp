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

}  // namespace
}  // namespace dflash

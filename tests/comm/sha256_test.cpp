// SHA-256 and HMAC-SHA256 (src/comm/sha256.h), the keyed digest of the rendezvous: the published
// SHA-256 examples (FIPS 180 appendix: "abc", the two-block message, a million 'a'), the empty
// message, every test case of RFC 4231 for HMAC-SHA256 (keys shorter than, equal to and longer
// than a block; test case 5 compares the first 128 bits, as the RFC does), feeding a message in
// pieces, and the constant-time comparison.
#include "comm/sha256.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace dflash {
namespace {

std::string repeat(char c, size_t n) {
    return std::string(n, c);
}

TEST(Sha256, PublishedExamples) {
    EXPECT_EQ(to_hex(sha256("")),
              "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(to_hex(sha256("abc")),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    // 56 bytes: the padding needs a second block.
    EXPECT_EQ(to_hex(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
              "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(to_hex(sha256(repeat('a', 1000000))),
              "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecesGiveTheDigestOfTheWhole) {
    std::string msg;
    for (int i = 0; i < 300; ++i) msg += static_cast<char>('!' + (i * 7) % 90);
    // Every length across the block and padding boundaries (55, 56, 63, 64, 119, 120, 128 ...),
    // each fed in uneven pieces.
    for (size_t len = 0; len <= msg.size(); ++len) {
        const std::string_view whole(msg.data(), len);
        Sha256 h;
        size_t at = 0;
        for (size_t piece = 1; at < len; piece = piece * 3 % 67 + 1) {
            const size_t take = std::min(piece, len - at);
            h.add(whole.substr(at, take));
            at += take;
        }
        EXPECT_EQ(to_hex(h.finish()), to_hex(sha256(whole))) << "length " << len;
    }
    // And a different message gives a different digest (the check above can fail).
    EXPECT_NE(to_hex(sha256("abd")), to_hex(sha256("abc")));
}

std::string bytes_from(int first, int last) {
    std::string s;
    for (int b = first; b <= last; ++b) s += static_cast<char>(b);
    return s;
}

TEST(HmacSha256, Rfc4231TestCases) {
    // 1: a 20-byte key.
    EXPECT_EQ(to_hex(hmac_sha256(repeat('\x0b', 20), "Hi There")),
              "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
    // 2: a key shorter than the digest.
    EXPECT_EQ(to_hex(hmac_sha256("Jefe", "what do ya want for nothing?")),
              "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
    // 3: 50 bytes of 0xdd under 20 bytes of 0xaa.
    EXPECT_EQ(to_hex(hmac_sha256(repeat('\xaa', 20), repeat('\xdd', 50))),
              "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe");
    // 4: the key 0x01..0x19.
    EXPECT_EQ(to_hex(hmac_sha256(bytes_from(1, 25), repeat('\xcd', 50))),
              "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b");
    // 5: the RFC gives the first 128 bits only.
    EXPECT_EQ(to_hex(hmac_sha256(repeat('\x0c', 20), "Test With Truncation")).substr(0, 32),
              "a3b6167473100ee06e0c796c2955552b");
    // 6 and 7: a 131-byte key (longer than a block: it is hashed first).
    EXPECT_EQ(to_hex(hmac_sha256(repeat('\xaa', 131),
                                 "Test Using Larger Than Block-Size Key - Hash Key First")),
              "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
    EXPECT_EQ(to_hex(hmac_sha256(repeat('\xaa', 131),
                                 "This is a test using a larger than block-size key and a larger "
                                 "than block-size data. The key needs to be hashed before being "
                                 "used by the HMAC algorithm.")),
              "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2");
}

TEST(HmacSha256, SameDigestComparesEveryByte) {
    const Sha256Digest a = hmac_sha256("key", "message");
    EXPECT_TRUE(same_digest(a, hmac_sha256("key", "message")));
    for (size_t i = 0; i < a.size(); ++i) {
        Sha256Digest b = a;
        b[i] ^= 1;
        EXPECT_FALSE(same_digest(a, b)) << "byte " << i;
    }
    EXPECT_FALSE(same_digest(a, hmac_sha256("key2", "message")));
}

}  // namespace
}  // namespace dflash

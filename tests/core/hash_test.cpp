// FNV-1a 64 (core/hash.h) against the published test vectors of the FNV authors, and the ways of
// feeding it (text, bytes, pieces, 64-bit words) agreeing with one run over the same bytes. Values
// written to disk (settings hashes in run directories, tokenizer names, shard checksums) depend on
// these staying exactly as they are.
#include "core/hash.h"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

namespace dflash {
namespace {

std::span<const uint8_t> bytes_of(std::string_view s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Hash, Fnv1a64PublishedVectors) {
    EXPECT_EQ(fnv1a64(std::string_view{}), 0xcbf29ce484222325ull);  // the offset basis
    EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(fnv1a64("foobar"), 0x85944171f73967e8ull);
    EXPECT_EQ(fnv1a64("chongo was here!\n"), 0x46810940eff5f915ull);
    EXPECT_EQ(kFnv1a64Offset, 0xcbf29ce484222325ull);
    EXPECT_EQ(kFnv1a64Prime, 1099511628211ull);
}

TEST(Hash, SettingsLikeTextKeepsItsRecordedValue) {
    // The shape of Settings::canonical_text(): the value is the one the settings hash has always
    // had for this text, so a run directory written before keeps matching on --resume.
    EXPECT_EQ(fnv1a64("infer.temperature = 0.0\ninfer.top_k = 0\ninfer.top_p = 1.0\n"),
              0xec628b8482be6d00ull);
}

TEST(Hash, BytesAndTextAgree) {
    for (const std::string& s :
         std::vector<std::string>{"", "a", "foobar", std::string("nul\0inside", 10), "\xff\x80"})
        EXPECT_EQ(fnv1a64(bytes_of(s)), fnv1a64(std::string_view(s))) << s;
    // Bytes >= 0x80 are mixed as unsigned values (a signed char would sign-extend).
    EXPECT_EQ(fnv1a64("\xff"), (kFnv1a64Offset ^ 0xffu) * kFnv1a64Prime);
}

TEST(Hash, PiecesContinueAsOneRun) {
    const std::string whole = "tokens then mask";
    const uint64_t h = fnv1a64(bytes_of("tokens "));
    EXPECT_EQ(fnv1a64(bytes_of("then mask"), h), fnv1a64(whole));
    EXPECT_EQ(fnv1a64("then mask", fnv1a64("tokens ")), fnv1a64(whole));
    // An empty piece changes nothing.
    EXPECT_EQ(fnv1a64(std::span<const uint8_t>{}, h), h);
}

TEST(Hash, U64IsItsEightBytesLeastSignificantFirst) {
    const uint64_t v = 0x0123456789abcdefull;
    const uint8_t le[8] = {0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01};
    EXPECT_EQ(fnv1a64_u64(v, kFnv1a64Offset), fnv1a64(le));
    EXPECT_EQ(fnv1a64_u64(v, kFnv1a64Offset), 0x37eb3f3347761c55ull);
    EXPECT_NE(fnv1a64_u64(1, kFnv1a64Offset), fnv1a64_u64(1ull << 56, kFnv1a64Offset));
}

}  // namespace
}  // namespace dflash

// Byte-level BPE: merges applied by rank (leftmost first on ties) the way HF `tokenizers` does,
// ignore_merges, both merge spellings, byte lengths of each id, and refusals of what byte-level
// BPE does not use.
#include "tokenizer/bpe.h"
#include "support/test_util.h"
#include "tokenizer/byte_level.h"

namespace dflash {
namespace {

using nlohmann::json;

// A vocabulary of the 256 bytes (id = byte) plus `extra` strings (byte-level characters), and the
// merges given as pairs of such strings.
json model(const std::vector<std::string>& extra,
           const std::vector<std::pair<std::string, std::string>>& merges,
           bool ignore_merges = false) {
    json vocab = json::object();
    for (int b = 0; b < 256; ++b)
        vocab[byte_level_encode(std::string(1, static_cast<char>(b)))] = b;
    int next = 256;
    for (const auto& e : extra) vocab[e] = next++;
    json m = json::array();
    for (const auto& [a, b] : merges) m.push_back(json::array({a, b}));
    return {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"byte_fallback", false},
            {"ignore_merges", ignore_merges},
            {"vocab", vocab},
            {"merges", m}};
}

std::vector<int32_t> encode(const BpeModel& m, std::string_view word,
                            std::vector<uint32_t>* lens = nullptr) {
    std::vector<int32_t> ids;
    std::vector<uint32_t> l;
    m.encode_word(word, ids, l);
    EXPECT_EQ(l.size(), ids.size());
    if (lens) *lens = l;
    return ids;
}

TEST(Bpe, MergesByRank) {
    // ids: ab=256, bc=257, abc=258
    const BpeModel m =
        BpeModel::from_json(model({"ab", "bc", "abc"}, {{"a", "b"}, {"b", "c"}, {"ab", "c"}}));
    EXPECT_EQ(encode(m, "abc"), (std::vector<int32_t>{258}));
    // a-b (rank 0) goes first, so b-c can no longer form on the right.
    EXPECT_EQ(encode(m, "bcab"), (std::vector<int32_t>{257, 256}));
    EXPECT_EQ(encode(m, "abx"), (std::vector<int32_t>{256, 'x'}));
    std::vector<uint32_t> lens;
    EXPECT_EQ(encode(m, "xabcx", &lens), (std::vector<int32_t>{'x', 258, 'x'}));
    EXPECT_EQ(lens, (std::vector<uint32_t>{1, 3, 1}));
    EXPECT_EQ(encode(m, ""), std::vector<int32_t>{});
    EXPECT_EQ(m.token_bytes(258), "abc");
    EXPECT_EQ(m.token_bytes(' '), " ");
    EXPECT_FALSE(m.token_bytes(259).has_value());
}

TEST(Bpe, LeftmostFirstOnEqualRanks) {
    const BpeModel m = BpeModel::from_json(model({"aa"}, {{"a", "a"}}));
    EXPECT_EQ(encode(m, "aaa"), (std::vector<int32_t>{256, 'a'}));
    EXPECT_EQ(encode(m, "aaaa"), (std::vector<int32_t>{256, 256}));
}

TEST(Bpe, SpacesAreByteLevelCharacters) {
    const std::string g = byte_level_encode(" ");  // "Ġ"
    const BpeModel m = BpeModel::from_json(model({g + "a"}, {{g, "a"}}));
    std::vector<uint32_t> lens;
    EXPECT_EQ(encode(m, " a", &lens), (std::vector<int32_t>{256}));
    EXPECT_EQ(lens, (std::vector<uint32_t>{2}));
    EXPECT_EQ(m.token_bytes(256), " a");
    EXPECT_EQ(m.find(g + "a"), 256);
}

TEST(Bpe, IgnoreMergesTakesWholeWords) {
    // "xyz" is in the vocabulary but no merge builds it.
    EXPECT_EQ(encode(BpeModel::from_json(model({"xyz"}, {}, false)), "xyz"),
              (std::vector<int32_t>{'x', 'y', 'z'}));
    EXPECT_EQ(encode(BpeModel::from_json(model({"xyz"}, {}, true)), "xyz"),
              (std::vector<int32_t>{256}));
}

TEST(Bpe, StringMergesAndRefusals) {
    json j = model({"ab"}, {});
    j["merges"] = json::array({"a b"});
    EXPECT_EQ(encode(BpeModel::from_json(j), "ab"), (std::vector<int32_t>{256}));

    j = model({}, {{"a", "b"}});  // "ab" is not in the vocabulary
    EXPECT_TRUE(test::has(test::error_of([&] { BpeModel::from_json(j); }), "not in the vocab"));
    j = model({}, {});
    j["vocab"].erase(byte_level_encode("\n"));
    EXPECT_TRUE(test::has(test::error_of([&] { BpeModel::from_json(j); }), "0x0A"));
    j = model({}, {});
    j["byte_fallback"] = true;
    EXPECT_TRUE(test::has(test::error_of([&] { BpeModel::from_json(j); }), "byte_fallback"));
    j = model({}, {});
    j["dropout"] = 0.1;
    EXPECT_TRUE(test::has(test::error_of([&] { BpeModel::from_json(j); }), "dropout"));
    j = model({}, {});
    j["type"] = "Unigram";
    EXPECT_TRUE(test::has(test::error_of([&] { BpeModel::from_json(j); }), "Unigram"));
}

}  // namespace
}  // namespace dflash

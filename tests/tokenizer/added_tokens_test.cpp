// Added tokens are cut out of the text first, leftmost-longest, never split; lstrip/rstrip take
// the adjacent ASCII whitespace; single_word tokens are refused.
#include "tokenizer/added_tokens.h"
#include "support/test_util.h"

namespace dflash {
namespace {

std::string show(std::string_view text, const std::vector<TextSegment>& segs) {
    std::string out;
    size_t at = 0;
    for (const auto& s : segs) {
        EXPECT_EQ(s.begin, at);
        at = s.end;
        out += "[" + std::string(text.substr(s.begin, s.end - s.begin)) +
               (s.id >= 0 ? "#" + std::to_string(s.id) : "") + "]";
    }
    EXPECT_EQ(at, text.size());
    return out;
}

TEST(AddedTokens, LeftmostLongest) {
    AddedTokens t;
    t.add({"<|im_start|>", 10, true});
    t.add({"<|im_end|>", 11, true});
    t.add({"<|im", 12, false});
    const std::string text = "a<|im_end|>b<|im_startx<|im_start|>";
    EXPECT_EQ(show(text, t.split(text)),
              "[a][<|im_end|>#11][b][<|im#12][_startx][<|im_start|>#10]");
    EXPECT_EQ(show("", t.split("")), "");
    EXPECT_EQ(show("plain", t.split("plain")), "[plain]");
    EXPECT_EQ(t.find("<|im_end|>")->id, 11);
    EXPECT_EQ(t.by_id(10)->content, "<|im_start|>");
    EXPECT_EQ(t.by_id(99), nullptr);
    EXPECT_EQ(t.max_id(), 12);
}

TEST(AddedTokens, StripFlags) {
    AddedTokens t;
    t.add({"<mask>", 5, true, /*lstrip=*/true, /*rstrip=*/false});
    t.add({"<r>", 6, true, false, true});
    const std::string text = "a  <mask> b<r>  c";
    EXPECT_EQ(show(text, t.split(text)), "[a][  <mask>#5][ b][<r>  #6][c]");
}

TEST(AddedTokens, FromJson) {
    const auto j = nlohmann::json::parse(
        R"([{"id": 7, "content": "<x>", "special": true}, {"id": 8, "content": "<y>"}])");
    const AddedTokens t = AddedTokens::from_json(j);
    EXPECT_TRUE(t.find("<x>")->special);
    EXPECT_FALSE(t.find("<y>")->special);
    EXPECT_TRUE(AddedTokens::from_json(nullptr).all().empty());
    const auto sw = nlohmann::json::parse(R"([{"id": 1, "content": "w", "single_word": true}])");
    EXPECT_TRUE(test::has(test::error_of([&] { AddedTokens::from_json(sw); }), "single_word"));
}

}  // namespace
}  // namespace dflash

// The Qwen2/Qwen3, Qwen3.5, Llama-3 and o200k (gpt-oss) split patterns under PCRE2: pieces as HF
// `tokenizers` cuts them (digits one by one vs. up to three, whitespace runs, case-insensitive
// contractions, Unicode letters/digits/spaces, o200k's case-shaped words, Qwen3.5's combining
// marks inside words), lookarounds confined to the piece, long inputs, and compile errors.
#include "tokenizer/regex_split.h"
#include "support/test_util.h"

namespace dflash {
namespace {

std::vector<std::string> pieces(std::string_view pattern, std::string_view text) {
    const RegexSplitter s{std::string(pattern)};
    std::vector<TextPiece> out;
    s.split(text, 0, out);
    std::vector<std::string> strs;
    size_t at = 0;
    for (const auto& p : out) {
        EXPECT_EQ(p.begin, at) << "pieces must cover the text in order";
        strs.emplace_back(text.substr(p.begin, p.end - p.begin));
        at = p.end;
    }
    EXPECT_EQ(at, text.size());
    return strs;
}

using V = std::vector<std::string>;

TEST(RegexSplit, WordsSpacesAndPunctuation) {
    for (auto pat : {kQwen2SplitPattern, kQwen35SplitPattern, kLlama3SplitPattern}) {
        EXPECT_EQ(pieces(pat, "Hello world!"), (V{"Hello", " world", "!"}));
        EXPECT_EQ(pieces(pat, "a   b"), (V{"a", "  ", " b"}));
        EXPECT_EQ(pieces(pat, "x  \n\n  y"), (V{"x", "  \n\n", " ", " y"}));
        EXPECT_EQ(pieces(pat, "end   "), (V{"end", "   "}));
        EXPECT_EQ(pieces(pat, "f(x);\n}"), (V{"f", "(x", ");\n", "}"}));
        EXPECT_EQ(pieces(pat, "I'M you'Re"), (V{"I", "'M", " you", "'Re"}));
        EXPECT_EQ(pieces(pat, ""), V{});
    }
}

TEST(RegexSplit, DigitsDiffer) {
    EXPECT_EQ(pieces(kQwen2SplitPattern, "12345"), (V{"1", "2", "3", "4", "5"}));
    EXPECT_EQ(pieces(kLlama3SplitPattern, "12345"), (V{"123", "45"}));
    // \p{N} covers other scripts' digits and numerals too.
    EXPECT_EQ(pieces(kLlama3SplitPattern, "\u0663\u0664\u2460x"), (V{"\u0663\u0664\u2460", "x"}));
}

TEST(RegexSplit, UnicodeClasses) {
    // Letters of any script; an ideographic space or NBSP leads a word like a space does.
    EXPECT_EQ(pieces(kQwen2SplitPattern, "\u4f60\u597d\u3000\u4e16\u754c"),
              (V{"\u4f60\u597d", "\u3000\u4e16\u754c"}));
    EXPECT_EQ(pieces(kQwen2SplitPattern, "a\u00a0b"), (V{"a", "\u00a0b"}));
    // \s with Unicode rules: a run of ideographic spaces before a letter keeps the last one.
    EXPECT_EQ(pieces(kQwen2SplitPattern, "a\u3000\u3000\u3000b"),
              (V{"a", "\u3000\u3000", "\u3000b"}));
    // Emoji are neither letters nor digits.
    EXPECT_EQ(pieces(kQwen2SplitPattern, "hi \U0001F600\U0001F603!"),
              (V{"hi", " \U0001F600\U0001F603!"}));
}

// o200k cuts words where lower case turns to upper case, keeps an all-capitals run whole, lets a
// contraction of any case follow either kind of word, and lets punctuation keep the newlines and
// slashes after it.
TEST(RegexSplit, O200kWordsFollowLetterCase) {
    const auto p = [](std::string_view text) { return pieces(kO200kSplitPattern, text); };
    EXPECT_EQ(p("CamelCase JSONParser"), (V{"Camel", "Case", " JSONParser"}));
    EXPECT_EQ(p("HELLO world"), (V{"HELLO", " world"}));
    EXPECT_EQ(p("DON'T you'RE I'M it's"), (V{"DON'T", " you'RE", " I'M", " it's"}));
    // (?i:...) folds case by Unicode, as Oniguruma does: a long s (U+017F) is an 's'.
    EXPECT_EQ(p("it'\u017f x"), (V{"it'\u017f", " x"}));
    EXPECT_EQ(p("1234567"), (V{"123", "456", "7"}));
    EXPECT_EQ(p("a/\n/b"), (V{"a", "/\n/", "b"}));
    EXPECT_EQ(p("x  \n\n  y"), (V{"x", "  \n\n", " ", " y"}));
    // Ideographs are both "upper" and "lower" (\p{Lo}), so they join a following Latin word;
    // combining marks (\p{M}) and title-case letters (\p{Lt}) stay inside words.
    EXPECT_EQ(p("\u4e2d\u6587English"), (V{"\u4e2d\u6587English"}));
    EXPECT_EQ(p("nai\u0308ve \u01c5ungla"), (V{"nai\u0308ve", " \u01c5ungla"}));
    // The other patterns split these differently.
    EXPECT_EQ(pieces(kLlama3SplitPattern, "I'M"), (V{"I", "'M"}));
    EXPECT_EQ(pieces(kLlama3SplitPattern, "CamelCase"), (V{"CamelCase"}));
}

// Qwen3.5 reads combining marks (\p{M}) as letters: accents, Indic vowel signs and viramas stay
// in their word, a mark after a space or an opening bracket leads a word like a letter, and a run
// of punctuation stops at a mark (which then stands alone, or starts the next word). Qwen2's
// pattern breaks each of these differently. Digits, contractions of any case and CRLF are cut as
// in Qwen2's. (Expected pieces checked with Python's `regex` module, which reads the pattern as
// Oniguruma does.)
TEST(RegexSplit, Qwen35KeepsCombiningMarksInWords) {
    const auto p = [](std::string_view text) { return pieces(kQwen35SplitPattern, text); };
    EXPECT_EQ(p("nai\u0308ve x\u0301\u0301y"), (V{"nai\u0308ve", " x\u0301\u0301y"}));
    EXPECT_EQ(pieces(kQwen2SplitPattern, "nai\u0308ve x\u0301\u0301y"),
              (V{"nai", "\u0308ve", " x", "\u0301\u0301", "y"}));
    const std::string hindi =
        "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e";
    EXPECT_EQ(p(hindi),
              (V{"\u0928\u092e\u0938\u094d\u0924\u0947", " \u0926\u0941\u0928\u093f\u092f\u093e"}));
    EXPECT_EQ(pieces(kQwen2SplitPattern, hindi).size(), 7u);
    EXPECT_EQ(p("!!\u0301?"), (V{"!!", "\u0301", "?"}));
    EXPECT_EQ(pieces(kQwen2SplitPattern, "!!\u0301?"), (V{"!!\u0301?"}));
    EXPECT_EQ(p("(\u0301x)"), (V{"(\u0301x", ")"}));
    EXPECT_EQ(p(" \u0301abc"), (V{" \u0301abc"}));
    EXPECT_EQ(p("1\u0301 2"), (V{"1", "\u0301", " ", "2"}));
    EXPECT_EQ(p("\u20dd\u0301"), (V{"\u20dd\u0301"}));  // an enclosing mark (Me) as well
    EXPECT_EQ(p("12345"), (V{"1", "2", "3", "4", "5"}));
    EXPECT_EQ(p("\u0663\u0664\u2460x"), (V{"\u0663", "\u0664", "\u2460", "x"}));
    EXPECT_EQ(p("DON'T YOU'RE it'S"), (V{"DON", "'T", " YOU", "'RE", " it", "'S"}));
    EXPECT_EQ(p("line\r\nnext.\r\n\r\n x"), (V{"line", "\r\n", "next", ".\r\n\r\n", " x"}));
}

// A long run of capitals with no lower-case letter after it makes the first word alternative take
// the run and give it back letter by letter before the second takes it whole: linear work, within
// the match limit.
TEST(RegexSplit, O200kLongCapitalRun) {
    const std::string caps(1 << 20, 'A');
    const auto p = pieces(kO200kSplitPattern, caps + " b");
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].size(), caps.size());
    EXPECT_EQ(p[1], " b");
}

TEST(RegexSplit, LookaheadSeesOnlyThePiece) {
    // "\s+(?!\S)" at the end of the text takes the whole run; the same run before a letter
    // leaves one space for the word.
    EXPECT_EQ(pieces(kQwen2SplitPattern, "a   "), (V{"a", "   "}));
    EXPECT_EQ(pieces(kQwen2SplitPattern, "a   b"), (V{"a", "  ", " b"}));
}

TEST(RegexSplit, LongInputsAndOffsets) {
    const std::string spaces(100000, ' ');
    const auto p = pieces(kQwen2SplitPattern, spaces + "x");
    ASSERT_EQ(p.size(), 2u);
    EXPECT_EQ(p[0].size(), spaces.size() - 1);
    EXPECT_EQ(p[1], " x");
    const RegexSplitter s{std::string(kGpt2SplitPattern)};
    std::vector<TextPiece> out;
    s.split("ab cd", 10, out);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].begin, 12u);
    EXPECT_EQ(out[1].end, 15u);
}

// A 10 MB run of whitespace once failed with "match limit exceeded": PCRE2's fixed limit on
// backtracking steps was below what `\s*[\r\n]+` spends giving such a run back one character at
// a time. The pieces are what HF cuts: the run (less the space that joins the next word), and the
// word. Tabs and spaces mixed, and a run ending the text, as well.
TEST(RegexSplit, TenMegabytesOfWhitespaceSplitLikeShortRuns) {
    std::string run(10 << 20, ' ');
    for (size_t i = 0; i < run.size(); i += 7) run[i] = '\t';
    run.back() = ' ';  // the space that joins the next word
    for (auto pat : {kQwen2SplitPattern, kQwen35SplitPattern, kLlama3SplitPattern,
                     kO200kSplitPattern, kGpt2SplitPattern}) {
        const auto p = pieces(pat, "a" + run + "b");
        ASSERT_EQ(p.size(), 3u);
        EXPECT_EQ(p[0], "a");
        EXPECT_EQ(p[1].size(), run.size() - 1);
        EXPECT_EQ(p[2], " b");
        const auto end = pieces(pat, "a" + run);
        ASSERT_EQ(end.size(), 2u);
        EXPECT_EQ(end[1].size(), run.size());
    }
}

TEST(RegexSplit, BadPatternNamesTheProblem) {
    const std::string msg = test::error_of([] { RegexSplitter s("(ab"); });
    EXPECT_TRUE(test::has(msg, "does not compile")) << msg;
    EXPECT_TRUE(test::has(msg, "(ab")) << msg;
}

}  // namespace
}  // namespace dflash

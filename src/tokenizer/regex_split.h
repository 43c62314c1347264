// The pre-tokenizer split of HF byte-level BPE tokenizers: a regular expression (Qwen2/Qwen3's,
// Qwen3.5's, Llama-3's, gpt-oss's o200k, GPT-2's) cuts text into pieces that BPE then encodes one
// by one. The patterns are written for Oniguruma (what the `tokenizers` library uses); they are
// compiled here with PCRE2 in UTF mode with Unicode properties (\p{L}, \p{M}, \p{N}, and \s / case
// folding by Unicode rules, PCRE2_UCP), which reads these patterns the same way. Tested by
// tests/tokenizer/regex_split_test.cpp.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace dflash {

// A piece of the text: bytes [begin, end) of the string that was split.
struct TextPiece {
    size_t begin = 0, end = 0;
};

// The split patterns of the tokenizers dflash reads, as their tokenizer.json files spell them.
inline constexpr std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// gpt-oss's (tiktoken's o200k): a word is an optional non-letter lead, upper-case-like letters,
// then lower-case-like ones (or upper-case-like letters then optional lower-case ones), with a
// contraction attached; so "CamelCase" is two pieces and "JSONParser" one. Digits in runs of up
// to three; punctuation keeps trailing newlines and slashes.
inline constexpr std::string_view kO200kSplitPattern =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// Qwen3.5's: Qwen2's with combining marks (\p{M}) as part of words, so a letter and its accents,
// or an Indic consonant and its vowel signs, stay one piece (in Qwen2's, punctuation takes a mark
// that follows it and words break at marks); digits still one by one.
inline constexpr std::string_view kQwen35SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// The pattern of the ByteLevel pre-tokenizer with use_regex = true (GPT-2).
inline constexpr std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// A compiled split pattern. Immutable after construction, so one object serves many threads
// (each split() call has its own match state).
class RegexSplitter {
  public:
    // Throws dflash::Error naming the pattern, the offset and PCRE2's reason if it does not
    // compile.
    explicit RegexSplitter(std::string pattern);
    ~RegexSplitter();
    RegexSplitter(RegexSplitter&& other) noexcept;
    RegexSplitter& operator=(RegexSplitter&& other) noexcept;
    RegexSplitter(const RegexSplitter&) = delete;
    RegexSplitter& operator=(const RegexSplitter&) = delete;

    // Appends the pieces of `text` (valid UTF-8) to `out`, in order and covering it: every match,
    // and every stretch between matches (HF's "Isolated" behaviour). Offsets are relative to
    // `text` plus `base`. Lookarounds see only `text`, as HF splits each piece on its own.
    void split(std::string_view text, size_t base, std::vector<TextPiece>& out) const;
    const std::string& pattern() const { return pattern_; }

  private:
    std::string pattern_;
    pcre2_real_code_8* code_ = nullptr;
};

}  // namespace dflash

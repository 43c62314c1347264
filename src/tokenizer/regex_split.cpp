// RegexSplitter on PCRE2 (JIT-compiled where the platform allows; the interpreter otherwise, and
// for a subject that overflows the JIT stack). Tested by tests/tokenizer/regex_split_test.cpp.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex_split.h"

#include <pcre2.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <utility>

#include "core/error.h"

namespace dflash {

namespace {

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    const int n = pcre2_get_error_message(code, buf, sizeof(buf));
    return n < 0 ? fmt::format("PCRE2 error {}", code)
                 : std::string(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
}

struct MatchDataFree {
    void operator()(pcre2_match_data* md) const { pcre2_match_data_free(md); }
};

struct MatchContextFree {
    void operator()(pcre2_match_context* mc) const { pcre2_match_context_free(mc); }
};

// PCRE2's match limit bounds the backtracking steps of one match attempt (10 million by default).
// The split patterns backtrack once per character of a whitespace run (`\s*[\r\n]+` takes the
// whole run, then gives it back one character at a time looking for a newline), so the default
// failed on a 10 MB run of spaces that HF splits without complaint. The limit grows with the text
// instead: these patterns stay linear in it, and a pattern that is not still stops.
constexpr uint64_t kMinMatchLimit = 10'000'000;
constexpr uint64_t kMatchStepsPerByte = 64;

uint32_t match_limit_for(size_t bytes) {
    const uint64_t want = std::max<uint64_t>(kMinMatchLimit, kMatchStepsPerByte * bytes);
    return static_cast<uint32_t>(std::min<uint64_t>(want, UINT32_MAX));
}

// Bytes of the UTF-8 character starting at s[i] (s is valid UTF-8).
size_t char_len(std::string_view s, size_t i) {
    const auto b = static_cast<unsigned char>(s[i]);
    return b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}

}  // namespace

RegexSplitter::RegexSplitter(std::string pattern) : pattern_(std::move(pattern)) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern_.data()), pattern_.size(),
                          PCRE2_UTF | PCRE2_UCP, &err, &offset, nullptr);
    DF_CHECK(code_ != nullptr,
             "the tokenizer's split pattern does not compile at offset {}: {} (pattern: {}); it "
             "uses a construct PCRE2 does not read like Oniguruma",
             offset, pcre2_message(err), pattern_);
    pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE);  // a failure leaves the interpreter in use
}

RegexSplitter::~RegexSplitter() {
    if (code_) pcre2_code_free(code_);
}

RegexSplitter::RegexSplitter(RegexSplitter&& other) noexcept
    : pattern_(std::move(other.pattern_)), code_(std::exchange(other.code_, nullptr)) {}

RegexSplitter& RegexSplitter::operator=(RegexSplitter&& other) noexcept {
    if (this != &other) {
        if (code_) pcre2_code_free(code_);
        pattern_ = std::move(other.pattern_);
        code_ = std::exchange(other.code_, nullptr);
    }
    return *this;
}

void RegexSplitter::split(std::string_view text, size_t base, std::vector<TextPiece>& out) const {
    if (text.empty()) return;
    std::unique_ptr<pcre2_match_data, MatchDataFree> md(
        pcre2_match_data_create_from_pattern(code_, nullptr));
    DF_CHECK(md != nullptr, "out of memory creating PCRE2 match data");
    std::unique_ptr<pcre2_match_context, MatchContextFree> mc(pcre2_match_context_create(nullptr));
    DF_CHECK(mc != nullptr, "out of memory creating a PCRE2 match context");
    pcre2_set_match_limit(mc.get(), match_limit_for(text.size()));
    const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t piece_start = 0;  // start of the stretch not yet emitted
    size_t search = 0;       // where the next match may start
    while (search < text.size()) {
        uint32_t options = PCRE2_NO_UTF_CHECK;
        int rc = pcre2_match(code_, subject, text.size(), search, options, md.get(), mc.get());
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
            options |= PCRE2_NO_JIT;  // the interpreter keeps its backtracking state on the heap
            rc = pcre2_match(code_, subject, text.size(), search, options, md.get(), mc.get());
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        DF_CHECK(rc >= 0,
                 "splitting {} bytes of text with the tokenizer's pattern failed at byte {}: {} "
                 "(the pattern backtracks too much on this text)",
                 text.size(), search, pcre2_message(rc));
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t s = ov[0], e = ov[1];
        if (e == s) {  // an empty match splits nothing; look again one character on
            if (s >= text.size()) break;
            search = s + char_len(text, s);
            continue;
        }
        if (s > piece_start) out.push_back({base + piece_start, base + s});
        out.push_back({base + s, base + e});
        piece_start = search = e;
    }
    if (piece_start < text.size()) out.push_back({base + piece_start, base + text.size()});
}

}  // namespace dflash

// NFC with an offset map (normalizer.h). Tested by tests/tokenizer/normalizer_test.cpp.
#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <memory>

#include "core/error.h"

namespace dflash {

namespace {

struct FreeDeleter {
    void operator()(utf8proc_uint8_t* p) const { std::free(p); }
};

std::string nfc_of(std::string_view s) {
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                     static_cast<utf8proc_ssize_t>(s.size()), &out,
                     static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
    std::unique_ptr<utf8proc_uint8_t, FreeDeleter> owned(out);
    DF_CHECK(n >= 0, "NFC normalization of {} bytes failed: {}", s.size(),
             utf8proc_errmsg(static_cast<utf8proc_ssize_t>(n)));
    return std::string(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
}

}  // namespace

NormalizedText nfc_normalize(std::string_view s) {
    NormalizedText out;
    bool ascii = true;
    for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
    if (ascii) {  // the common case: nothing to do
        out.text.assign(s);
        return out;
    }
    out.text.reserve(s.size());
    out.source.reserve(s.size() + 1);
    bool changed = false;
    for (size_t start = 0; start < s.size();) {
        size_t end = start + 1;  // a stretch: one character, then every non-ASCII byte after it
        while (end < s.size() && static_cast<unsigned char>(s[end]) >= 0x80) ++end;
        const std::string_view piece = s.substr(start, end - start);
        if (end - start == 1) {
            out.text.push_back(s[start]);
            out.source.push_back(static_cast<uint32_t>(start));
        } else {
            const std::string nfc = nfc_of(piece);
            const bool same = nfc == piece;
            changed = changed || !same;
            for (size_t k = 0; k < nfc.size(); ++k)
                out.source.push_back(static_cast<uint32_t>(same ? start + k : start));
            out.text += nfc;
        }
        start = end;
    }
    out.source.push_back(static_cast<uint32_t>(s.size()));
    if (!changed) out.source.clear();
    return out;
}

}  // namespace dflash

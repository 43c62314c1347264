// Local text corpus for the demo (see local_corpus.h). Tested by tests/data/local_corpus_test.cpp.
#include "data/local_corpus.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "tokenizer/tokenizer.h"

namespace dflash {

namespace {

// Files larger than this are not text a demo wants (logs, dumps); skipping them bounds memory.
constexpr uintmax_t kMaxFileBytes = 64ull << 20;

std::string normalise_ext(const std::string& e) {
    if (e.empty() || e.front() == '.') return e;
    return "." + e;
}

std::vector<std::filesystem::path> files_under(const std::filesystem::path& root) {
    namespace fs = std::filesystem;
    std::vector<fs::path> out;
    std::error_code ec;
    if (fs::is_regular_file(root, ec)) {
        out.push_back(root);
        return out;
    }
    if (!fs::is_directory(root, ec)) return out;
    fs::recursive_directory_iterator it(root, fs::directory_options::skip_permission_denied, ec);
    for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::error_code fec;
        if (it->is_regular_file(fec)) out.push_back(it->path());
    }
    std::sort(out.begin(), out.end());
    return out;
}

// The file's text, or empty if it is unreadable, too large, or binary.
std::string read_text_file(const std::filesystem::path& p) {
    std::error_code ec;
    const uintmax_t size = std::filesystem::file_size(p, ec);
    if (ec || size == 0 || size > kMaxFileBytes) return {};
    std::ifstream in(p, std::ios::binary);
    if (!in) return {};
    std::string s(size, '\0');
    in.read(s.data(), static_cast<std::streamsize>(size));
    if (static_cast<uintmax_t>(in.gcount()) != size) return {};
    if (s.find('\0') != std::string::npos || !is_valid_utf8(s)) return {};
    if (s.find_first_not_of(" \t\r\n") == std::string::npos) return {};
    return s;
}

// Largest cut <= `at` that does not fall inside a UTF-8 sequence (text is valid UTF-8).
size_t utf8_floor(std::string_view s, size_t at) {
    while (at > 0 && at < s.size() && (static_cast<unsigned char>(s[at]) & 0xC0) == 0x80) --at;
    return at;
}

}  // namespace

std::vector<std::string> split_document(const std::string& text, size_t max_doc_bytes) {
    DF_CHECK(max_doc_bytes >= 4, "max_doc_bytes={} must be at least 4 (one UTF-8 character)",
             max_doc_bytes);
    std::vector<std::string> out;
    std::string cur;
    size_t pos = 0;
    while (pos < text.size()) {
        size_t eol = text.find('\n', pos);
        eol = eol == std::string::npos ? text.size() : eol + 1;  // the line keeps its newline
        std::string_view line(text.data() + pos, eol - pos);
        if (cur.size() + line.size() > max_doc_bytes && !cur.empty()) {
            out.push_back(std::move(cur));
            cur.clear();
        }
        while (line.size() > max_doc_bytes) {  // a single over-long line: hard cuts
            const size_t cut = utf8_floor(line, max_doc_bytes);
            out.emplace_back(line.substr(0, cut));
            line.remove_prefix(cut);
        }
        cur += line;
        pos = eol;
    }
    if (!cur.empty()) out.push_back(std::move(cur));
    return out;
}

std::vector<std::string> collect_text_documents(const std::vector<std::filesystem::path>& roots,
                                                const std::vector<std::string>& extensions,
                                                size_t max_total_bytes, size_t max_doc_bytes) {
    std::set<std::string> exts;
    for (const auto& e : extensions) exts.insert(normalise_ext(e));
    std::vector<std::string> docs;
    size_t total = 0;
    for (const auto& root : roots) {
        for (const auto& file : files_under(root)) {
            if (!exts.empty() && !exts.count(file.extension().string())) continue;
            const std::string text = read_text_file(file);
            if (text.empty()) continue;
            for (auto& d : split_document(text, max_doc_bytes)) {
                if (total + d.size() > max_total_bytes) return docs;
                total += d.size();
                docs.push_back(std::move(d));
            }
        }
    }
    return docs;
}

CorpusSplit split_heldout(const std::vector<std::string>& docs, double heldout_fraction,
                          uint64_t seed) {
    DF_CHECK(heldout_fraction >= 0.0 && heldout_fraction < 1.0,
             "held-out fraction {} must be in [0, 1)", heldout_fraction);
    const size_t n = docs.size();
    size_t k = static_cast<size_t>(std::llround(heldout_fraction * static_cast<double>(n)));
    if (heldout_fraction > 0.0 && n >= 2) k = std::clamp<size_t>(k, 1, n - 1);
    if (n < 2) k = 0;
    std::vector<size_t> idx(n);
    std::iota(idx.begin(), idx.end(), size_t{0});
    Rng rng(seed);
    for (size_t i = 0; i < k; ++i) {
        const size_t j = i + static_cast<size_t>(rng.below(n - i));
        std::swap(idx[i], idx[j]);
    }
    std::vector<uint8_t> held(n, 0);
    for (size_t i = 0; i < k; ++i) held[idx[i]] = 1;
    CorpusSplit out;
    for (size_t i = 0; i < n; ++i) (held[i] ? out.heldout : out.train).push_back(docs[i]);
    return out;
}

}  // namespace dflash

// A text corpus from files already on the machine (docs, headers, sources), so that `dflash demo`
// can pretrain a small target with no network and no dataset download.
// Tested by tests/data/local_corpus_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dflash {

// Walks each root (a directory, recursively, or a single file) in the given order, visiting its
// files in sorted path order, so the result is the same on every run. Keeps regular files whose
// extension is in `extensions` ("txt" or ".txt"; "" matches files without one; an empty list
// matches all) and whose content is non-empty valid UTF-8 without NUL bytes (others are skipped
// as binary). Each file is split at line boundaries into documents of at most max_doc_bytes (a
// longer line is cut at a UTF-8 character boundary). Stops before the total would pass
// max_total_bytes. Missing roots and unreadable files are skipped.
std::vector<std::string> collect_text_documents(const std::vector<std::filesystem::path>& roots,
                                                const std::vector<std::string>& extensions,
                                                size_t max_total_bytes, size_t max_doc_bytes);

// Splits a document of any size at line boundaries into pieces of at most max_doc_bytes.
std::vector<std::string> split_document(const std::string& text, size_t max_doc_bytes);

struct CorpusSplit {
    std::vector<std::string> train;
    std::vector<std::string> heldout;
};

// A deterministic held-out split: round(fraction * n) documents (at least one when fraction > 0
// and n >= 2; never all of them), chosen by a shuffle seeded with `seed`. Both parts keep the
// input order.
CorpusSplit split_heldout(const std::vector<std::string>& docs, double heldout_fraction,
                          uint64_t seed);

}  // namespace dflash

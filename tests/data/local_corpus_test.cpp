// Local corpus collection: deterministic walk, extension filter, binary/non-UTF-8 skipping,
// line-boundary splitting, the total budget, and the held-out split.
#include "data/local_corpus.h"

#include <fstream>
#include <set>

#include "core/error.h"
#include "support/test_util.h"
#include "tokenizer/tokenizer.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::write_file;

std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += s;
    return out;
}

TEST(LocalCorpus, WalksSortedFiltersAndSkipsBinary) {
    test::TempDir dir("corpus");
    write_file(dir / "b/2.txt", "two\n");
    write_file(dir / "b/1.md", "one\n");
    write_file(dir / "a.txt", "zero\n");
    write_file(dir / "c.bin", std::string("bi\0nary", 7));
    write_file(dir / "d.txt", std::string("nul\0inside", 10));
    write_file(dir / "e.txt", "bad \xC3\x28 utf8");
    write_file(dir / "f.txt", "  \n\n");
    write_file(dir / "g.cpp", "int x;\n");
    write_file(dir / "README", "readme\n");
    const std::vector<fs::path> roots = {dir.path(), dir / "missing"};
    auto docs = collect_text_documents(roots, {"txt", ".md"}, 1 << 20, 1 << 10);
    EXPECT_EQ(docs, (std::vector<std::string>{"zero\n", "one\n", "two\n"}));
    EXPECT_EQ(collect_text_documents(roots, {"txt", ".md"}, 1 << 20, 1 << 10), docs);
    docs = collect_text_documents({dir.path()}, {}, 1 << 20, 1 << 10);  // every extension
    EXPECT_EQ(docs, (std::vector<std::string>{"readme\n", "zero\n", "one\n", "two\n", "int x;\n"}));
    docs = collect_text_documents({dir.path()}, {""}, 1 << 20, 1 << 10);  // no extension
    EXPECT_EQ(docs, (std::vector<std::string>{"readme\n"}));
    docs = collect_text_documents({dir / "g.cpp"}, {"cpp"}, 1 << 20, 1 << 10);  // a file root
    EXPECT_EQ(docs, (std::vector<std::string>{"int x;\n"}));
}

TEST(LocalCorpus, SplitsLargeFilesAtLineBoundariesAndRespectsTheBudget) {
    test::TempDir dir("corpus");
    std::string big;
    for (int i = 0; i < 200; ++i) big += "line " + std::to_string(i) + " of the big file\n";
    write_file(dir / "big.txt", big);
    const auto docs = collect_text_documents({dir.path()}, {"txt"}, 1 << 20, 100);
    EXPECT_GT(docs.size(), 40u);
    EXPECT_EQ(join(docs), big);  // nothing lost, nothing reordered
    for (const auto& d : docs) {
        EXPECT_LE(d.size(), 100u);
        EXPECT_EQ(d.back(), '\n');  // cut at a line boundary
    }
    const auto few = collect_text_documents({dir.path()}, {"txt"}, 1000, 100);
    size_t total = 0;
    for (const auto& d : few) total += d.size();
    EXPECT_LE(total, 1000u);
    EXPECT_GT(total, 900u);
    EXPECT_TRUE(std::equal(few.begin(), few.end(), docs.begin()));
}

TEST(LocalCorpus, OverlongLinesAreCutBetweenCharacters) {
    std::string line;
    for (int i = 0; i < 100; ++i) line += "é世";  // 2 + 3 bytes
    const auto parts = split_document(line + "\nend\n", 16);
    EXPECT_EQ(join(parts), line + "\nend\n");
    for (const auto& p : parts) {
        EXPECT_LE(p.size(), 16u);
        EXPECT_TRUE(is_valid_utf8(p)) << p;
    }
    EXPECT_THROW(split_document("x", 2), Error);
}

TEST(LocalCorpus, HeldoutSplitIsDeterministicAndExact) {
    std::vector<std::string> docs;
    for (int i = 0; i < 50; ++i) docs.push_back("doc " + std::to_string(i));
    const auto a = split_heldout(docs, 0.1, 42);
    EXPECT_EQ(a.heldout.size(), 5u);
    EXPECT_EQ(a.train.size(), 45u);
    const auto b = split_heldout(docs, 0.1, 42);
    EXPECT_EQ(a.heldout, b.heldout);
    EXPECT_EQ(a.train, b.train);
    EXPECT_NE(split_heldout(docs, 0.1, 43).heldout, a.heldout);
    std::set<std::string> all(a.train.begin(), a.train.end());
    for (const auto& h : a.heldout) EXPECT_TRUE(all.insert(h).second) << "in both parts: " << h;
    EXPECT_EQ(all.size(), docs.size());
    EXPECT_TRUE(std::is_sorted(a.train.begin(), a.train.end(), [&](auto& x, auto& y) {
        return std::stoi(x.substr(4)) < std::stoi(y.substr(4));
    }));                                                               // input order kept
    EXPECT_EQ(split_heldout({"x", "y"}, 0.01, 1).heldout.size(), 1u);  // at least one
    EXPECT_EQ(split_heldout({"x"}, 0.5, 1).train.size(), 1u);          // never all
    EXPECT_THROW(split_heldout(docs, 1.0, 1), Error);
}

}  // namespace
}  // namespace dflash

// Shard round trip, atomic writing, and every kind of corruption being an error that names the
// file, the byte offset and (for sample data) the sample.
#include "data/shard.h"

#include <cstring>
#include <fstream>

#include "core/error.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::has;

std::vector<Encoded> make_samples() {
    std::vector<Encoded> out;
    Rng rng(7);
    for (int i = 0; i < 5; ++i) {
        Encoded e;
        const int len = 3 + 4 * i;
        for (int k = 0; k < len; ++k) {
            e.tokens.push_back(static_cast<int32_t>(rng.below(264)));
            e.loss_mask.push_back(static_cast<uint8_t>(rng.below(2)));
        }
        out.push_back(e);
    }
    return out;
}

fs::path write_sample_shard(const fs::path& path) {
    ShardWriter w(path, "byte", 264);
    for (const auto& s : make_samples()) w.add(s);
    w.finish();
    return path;
}

std::vector<char> read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& p, const std::vector<char>& b) {
    std::ofstream(p, std::ios::binary | std::ios::trunc).write(b.data(), (std::streamsize)b.size());
}

// Opens the shard and reads every sample; returns the error message ("" if none).
std::string open_and_read_all(const fs::path& p) {
    try {
        ShardReader r(p);
        r.verify_all();
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

// Section offsets of the test shard: header "byte" name -> 48 + 8 (name padded) + 8 checksum.
constexpr uint64_t kHeader = 64;
constexpr uint64_t kSamples = 5;
constexpr uint64_t kTokens = 3 + 7 + 11 + 15 + 19;
constexpr uint64_t kTokensAt = kHeader + kSamples * 24 + 8;
constexpr uint64_t kMaskAt = kTokensAt + 4 * kTokens;

TEST(Shard, RoundTrip) {
    test::TempDir dir("shard");
    const auto path = write_sample_shard(dir / "a.dfshard");
    EXPECT_FALSE(fs::exists(dir / "a.dfshard.tmp"));
    EXPECT_EQ(fs::file_size(path), kMaskAt + kTokens);
    ShardReader r(path);
    EXPECT_EQ(r.info().version, kShardVersion);
    EXPECT_EQ(r.info().tokenizer, "byte");
    EXPECT_EQ(r.info().vocab_size, 264);
    EXPECT_EQ(r.num_samples(), 5);
    EXPECT_EQ(r.info().num_tokens, static_cast<int64_t>(kTokens));
    const auto want = make_samples();
    for (int i = 0; i < 5; ++i) {
        EXPECT_EQ(r.sample_length(i), static_cast<int64_t>(want[i].tokens.size()));
        const Encoded got = r.read(i);
        EXPECT_EQ(got.tokens, want[i].tokens) << i;
        EXPECT_EQ(got.loss_mask, want[i].loss_mask) << i;
    }
    EXPECT_THROW(r.read(5), Error);
}

TEST(Shard, WriterIsAtomicAndValidatesSamples) {
    test::TempDir dir("shard");
    ShardWriter w(dir / "b.dfshard", "byte", 264);
    w.add({{1, 2}, {0, 1}});
    EXPECT_FALSE(fs::exists(dir / "b.dfshard"));     // nothing under the real name before finish
    EXPECT_THROW(w.add({{1, 264}, {0, 1}}), Error);  // id outside vocab
    EXPECT_THROW(w.add({{1, 2}, {0}}), Error);       // length mismatch
    EXPECT_THROW(w.add({{1, 2}, {0, 2}}), Error);    // mask not 0/1
    EXPECT_THROW(w.add({{}, {}}), Error);            // empty
    w.finish();
    EXPECT_TRUE(fs::exists(dir / "b.dfshard"));
    EXPECT_EQ(ShardReader(dir / "b.dfshard").num_samples(), 1);
}

TEST(Shard, TruncationAnywhereIsAnErrorWithOffset) {
    test::TempDir dir("shard");
    const auto good = read_bytes(write_sample_shard(dir / "good.dfshard"));
    const auto path = dir / "cut.dfshard";
    struct Cut {
        uint64_t at;
        std::string where;
    };
    const std::vector<Cut> cuts = {
        {0, "inside the header"},
        {5, "inside the header"},
        {30, "truncated"},
        {kHeader - 1, "truncated"},
        {kHeader + 30, "inside the sample index (entry 1"},
        {kTokensAt - 1, "inside the sample index"},
        {kTokensAt + 4 * 3 + 2, "inside the tokens of sample 1"},
        {kMaskAt - 1, "inside the tokens of sample 4"},
        {kMaskAt + 3, "inside the loss mask of sample 1"},
        {good.size() - 1, "inside the loss mask of sample 4"},
    };
    for (const auto& c : cuts) {
        write_bytes(path, std::vector<char>(good.begin(), good.begin() + c.at));
        const std::string msg = open_and_read_all(path);
        EXPECT_TRUE(has(msg, path.string())) << c.at << ": " << msg;
        EXPECT_TRUE(has(msg, "truncated")) << c.at << ": " << msg;
        EXPECT_TRUE(has(msg, "byte offset " + std::to_string(c.at))) << c.at << ": " << msg;
        EXPECT_TRUE(has(msg, c.where)) << c.at << ": " << msg;
    }
    // Bytes appended after the data are not silently ignored either.
    auto longer = good;
    longer.push_back('x');
    write_bytes(path, longer);
    EXPECT_TRUE(has(open_and_read_all(path), "unexpected bytes")) << open_and_read_all(path);
}

TEST(Shard, CorruptionIsDetectedWhereItHappens) {
    test::TempDir dir("shard");
    const auto good = read_bytes(write_sample_shard(dir / "good.dfshard"));
    const auto path = dir / "bad.dfshard";
    struct Flip {
        uint64_t at;
        std::string needle;
    };
    const std::vector<Flip> flips = {
        {20, "corrupt header"},                                // sample count
        {50, "corrupt header"},                                // tokenizer name
        {kHeader - 3, "corrupt header"},                       // the checksum itself
        {kHeader + 24 + 9, "corrupt sample index"},            // length of sample 1
        {kTokensAt + 4 * (3 + 7) + 1, "sample 2 is corrupt"},  // a token of sample 2
        {kMaskAt + 3 + 7 + 11 + 2, "sample 3 is corrupt"},     // a mask byte of sample 3
    };
    for (const auto& f : flips) {
        auto bad = good;
        bad[f.at] ^= 0x10;
        write_bytes(path, bad);
        const std::string msg = open_and_read_all(path);
        EXPECT_TRUE(has(msg, path.string())) << f.at << ": " << msg;
        EXPECT_TRUE(has(msg, f.needle)) << f.at << ": " << msg;
        EXPECT_TRUE(has(msg, "byte offset")) << f.at << ": " << msg;
    }
    // A corrupt sample does not poison the others: they still read.
    auto bad = good;
    bad[kTokensAt + 4 * (3 + 7) + 1] ^= 0x10;
    write_bytes(path, bad);
    ShardReader r(path);
    EXPECT_NO_THROW(r.read(1));
    EXPECT_NO_THROW(r.read(3));
    EXPECT_THROW(r.read(2), Error);
}

TEST(Shard, WrongMagicAndNewerVersion) {
    test::TempDir dir("shard");
    const auto good = read_bytes(write_sample_shard(dir / "good.dfshard"));
    const auto path = dir / "x.dfshard";
    auto bad = good;
    bad[2] = 'X';
    write_bytes(path, bad);
    EXPECT_TRUE(has(open_and_read_all(path), "wrong magic")) << open_and_read_all(path);

    write_bytes(path, {'{', '"', 'a', '"', '}'});  // some other small file
    EXPECT_TRUE(has(open_and_read_all(path), "wrong magic")) << open_and_read_all(path);

    bad = good;
    const uint32_t v = kShardVersion + 1;
    std::memcpy(bad.data() + 8, &v, 4);
    write_bytes(path, bad);
    const std::string msg = open_and_read_all(path);
    EXPECT_TRUE(has(msg, "version " + std::to_string(v))) << msg;
    EXPECT_TRUE(has(msg, "upgrade dflash")) << msg;
}

TEST(Shard, ListShardsIsSortedAndFiltered) {
    test::TempDir dir("shard");
    write_sample_shard(dir / "b.dfshard");
    write_sample_shard(dir / "a.dfshard");
    std::ofstream(dir / "notes.txt") << "x";
    std::ofstream(dir / "c.dfshard.tmp") << "x";
    const auto list = list_shards(dir.path());
    ASSERT_EQ(list.size(), 2u);
    EXPECT_EQ(list[0].filename(), "a.dfshard");
    EXPECT_EQ(list[1].filename(), "b.dfshard");
    EXPECT_THROW(list_shards(dir / "missing"), Error);
}

}  // namespace
}  // namespace dflash

// manifest.json as the truth about a dataset (src/data/manifest.h): verify_dataset passes a
// prepared dataset and fails, naming the problem, for a deleted shard, a shard of another dataset
// swapped in, an extra shard, a corrupt sample, a missing and a corrupt manifest;
// ShardedDataset::open refuses the same mismatches without reading samples.
#include "data/manifest.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/prepare.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::has;

// A prepared dataset of `n` text samples, one shard per two samples.
void prepare(const fs::path& dir, const std::string& word, int n) {
    std::string lines;
    for (int i = 0; i < n; ++i) lines += "{\"text\": \"" + word + " " + std::to_string(i) + "\"}\n";
    test::write_file(dir.string() + ".jsonl", lines);
    PrepareOptions opt;
    opt.inputs = {dir.string() + ".jsonl"};
    opt.output_dir = dir;
    opt.samples_per_shard = 2;
    const auto tok = make_byte_tokenizer();
    prepare_dataset(opt, *tok, Logger());
}

std::string problems_of(const fs::path& dir) {
    std::string all;
    for (const auto& p : verify_dataset(dir).problems) all += p + "\n";
    return all;
}

TEST(Manifest, APreparedDatasetVerifies) {
    test::TempDir dir;
    prepare(dir / "ds", "alpha", 5);
    const DatasetCheck c = verify_dataset(dir / "ds");
    EXPECT_TRUE(c.ok()) << problems_of(dir / "ds");
    EXPECT_EQ(c.manifest.samples, 5);
    EXPECT_EQ(c.manifest.shards.size(), 3u);
    EXPECT_EQ(c.response_tokens, c.manifest.response_tokens);
    EXPECT_GT(c.response_tokens, 0);
}

TEST(Manifest, ADeletedShardFails) {
    test::TempDir dir;
    prepare(dir / "ds", "alpha", 5);
    fs::remove(dir / "ds" / "shard-00001.dfshard");
    EXPECT_TRUE(has(problems_of(dir / "ds"),
                    "shard-00001.dfshard is listed in manifest.json but "
                    "missing"));
    EXPECT_TRUE(has(error_of([&] { ShardedDataset::open(dir / "ds"); }), "missing"));
}

TEST(Manifest, AShardOfAnotherDatasetFails) {
    test::TempDir dir;
    prepare(dir / "ds", "alpha", 5);
    prepare(dir / "other", "beta", 5);
    // Same name, same tokenizer, internally sound: only the manifest can tell.
    fs::copy_file(dir / "other" / "shard-00001.dfshard", dir / "ds" / "shard-00001.dfshard",
                  fs::copy_options::overwrite_existing);
    EXPECT_TRUE(has(problems_of(dir / "ds"), "the content checksum")) << problems_of(dir / "ds");
    EXPECT_TRUE(has(error_of([&] { ShardedDataset::open(dir / "ds"); }), "not the one"));
}

TEST(Manifest, AnExtraShardFails) {
    test::TempDir dir;
    prepare(dir / "ds", "alpha", 5);
    prepare(dir / "other", "beta", 7);
    fs::copy_file(dir / "other" / "shard-00003.dfshard", dir / "ds" / "shard-00003.dfshard");
    EXPECT_TRUE(has(problems_of(dir / "ds"), "shard-00003.dfshard is not listed"));
    EXPECT_TRUE(has(error_of([&] { ShardedDataset::open(dir / "ds"); }), "not listed"));
}

TEST(Manifest, ACorruptSampleFails) {
    test::TempDir dir;
    prepare(dir / "ds", "alpha", 5);
    const fs::path shard = dir / "ds" / "shard-00002.dfshard";
    std::string bytes = test::read_file(shard);
    bytes[bytes.size() - 3] ^= 0x1;  // in the loss mask of the last sample
    test::write_file(shard, bytes);
    EXPECT_TRUE(has(problems_of(dir / "ds"), "is corrupt")) << problems_of(dir / "ds");
}

TEST(Manifest, AMissingOrCorruptManifestFails) {
    test::TempDir dir;
    prepare(dir / "ds", "alpha", 3);
    const fs::path m = dir / "ds" / kManifestFile;
    const std::string good = test::read_file(m);
    test::write_file(m, "{\"format\": \"dfshard\", ");
    EXPECT_TRUE(has(problems_of(dir / "ds"), "is not valid JSON"));
    EXPECT_TRUE(has(error_of([&] { ShardedDataset::open(dir / "ds"); }), "is not valid JSON"));
    auto j = nlohmann::json::parse(good);
    j.erase("shard_files");
    test::write_file(m, j.dump());
    EXPECT_TRUE(has(problems_of(dir / "ds"), "no \"shard_files\""));
    j = nlohmann::json::parse(good);
    j["samples"] = 4;
    test::write_file(m, j.dump());
    EXPECT_TRUE(has(problems_of(dir / "ds"), "totals (4 samples"));
    fs::remove(m);
    EXPECT_TRUE(has(problems_of(dir / "ds"), "has no manifest.json"));
}

TEST(Manifest, RoundTripsThroughJson) {
    DatasetManifest m;
    m.tokenizer = "byte";
    m.vocab_size = 264;
    m.inputs = {"a.jsonl"};
    m.records = 3;
    m.samples = 2;
    m.tokens = 40;
    m.response_tokens = 30;
    m.skipped = 1;
    m.shards = {{"shard-00000.dfshard", 2, 40, 0x0123456789abcdefull}};
    const DatasetManifest back = DatasetManifest::from_json(m.to_json(), "test");
    EXPECT_EQ(back.to_json(), m.to_json());
    EXPECT_EQ(back.shards.at(0).content_checksum, 0x0123456789abcdefull);
    // A count of 1e30 is refused as itself, not read as -9223372036854775808.
    auto j = m.to_json();
    j["tokens"] = 1e30;
    const std::string e = error_of([&] { DatasetManifest::from_json(j, "m.json"); });
    EXPECT_TRUE(has(e, "m.json: \"tokens\" is 1e+30; expected a whole number")) << e;
}

}  // namespace
}  // namespace dflash

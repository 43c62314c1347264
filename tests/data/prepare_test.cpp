// prepare_dataset: JSONL -> shards with the right samples, counts, skips, manifest, the
// no-overwrite guard, progress lines, clean-up after a malformed line, an --overwrite that fails
// leaving the old dataset intact, and a second writer refused while one holds the directory.
#include "data/prepare.h"

#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dir_lock.h"
#include "core/error.h"
#include "data/dataset.h"
#include "data/jsonl.h"
#include "data/manifest.h"
#include "support/test_util.h"
#include "tokenizer/hf_tokenizer.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::write_file;

const char* kJsonl =
    "{\"text\": \"hello world\"}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, "
    "{\"role\": \"assistant\", \"content\": \"hey there\"}]}\n"
    "{\"messages\": [{\"role\": \"user\", \"content\": \"no reply\"}]}\n"
    "\n"
    "{\"conversations\": [{\"from\": \"human\", \"value\": \"q\"}, "
    "{\"from\": \"gpt\", \"value\": \"an answer\"}]}\n";

TEST(Prepare, WritesShardsThatReadBackAsTheEncodedRecords) {
    test::TempDir dir("prep");
    write_file(dir / "a.jsonl", kJsonl);
    write_file(dir / "b.jsonl", "{\"text\": \"second file\"}\n");
    const auto tok = make_byte_tokenizer();
    auto sink = LogSink::capturing(LogLevel::info);
    PrepareOptions opt;
    opt.inputs = {dir / "a.jsonl", dir / "b.jsonl"};
    opt.output_dir = dir / "out";
    opt.samples_per_shard = 2;
    opt.progress_interval_s = 0;
    const PrepareStats st = prepare_dataset(opt, *tok, Logger(sink, "data"));
    EXPECT_EQ(st.records, 5);
    EXPECT_EQ(st.skipped, 1);  // the chat without an assistant reply
    EXPECT_EQ(st.samples, 4);
    EXPECT_EQ(st.shards, 2);

    std::vector<Encoded> want;
    for (const auto& in : opt.inputs) {
        for (const auto& r : read_jsonl_file(in)) {
            Encoded e = encode_record(*tok, r);
            if (r.kind == JsonlRecord::Kind::chat && r.messages.size() == 1) continue;
            want.push_back(e);
        }
    }
    const ShardedDataset ds = ShardedDataset::open(opt.output_dir);
    ASSERT_EQ(ds.num_samples(), 4);
    EXPECT_EQ(ds.tokenizer_name(), "byte");
    EXPECT_EQ(ds.vocab_size(), tok->vocab_size());
    int64_t tokens = 0, response = 0;
    for (int64_t i = 0; i < 4; ++i) {
        const Encoded got = ds.sample(i);
        EXPECT_EQ(got.tokens, want[i].tokens) << i;
        EXPECT_EQ(got.loss_mask, want[i].loss_mask) << i;
        tokens += static_cast<int64_t>(got.tokens.size());
        for (uint8_t m : got.loss_mask) response += m;
    }
    EXPECT_EQ(st.tokens, tokens);
    EXPECT_EQ(st.response_tokens, response);

    std::ifstream mf(opt.output_dir / "manifest.json");
    const auto manifest = nlohmann::json::parse(mf);
    EXPECT_EQ(manifest["samples"], 4);
    EXPECT_EQ(manifest["tokenizer"], "byte");
    EXPECT_FALSE(sink->captured().empty()) << "no progress lines";

    // A second run into the same directory must not silently mix datasets...
    EXPECT_THROW(prepare_dataset(opt, *tok, Logger()), Error);
    // ...unless asked to replace them.
    opt.overwrite = true;
    opt.samples_per_shard = 10;
    EXPECT_EQ(prepare_dataset(opt, *tok, Logger()).shards, 1);
    EXPECT_EQ(list_shards(opt.output_dir).size(), 1u);
}

TEST(Prepare, MalformedLineFailsWithLineNumberAndLeavesNoShards) {
    test::TempDir dir("prep");
    std::string lines;
    for (int i = 0; i < 5; ++i) lines += "{\"text\": \"sample " + std::to_string(i) + "\"}\n";
    lines += "{\"text\": oops}\n";
    write_file(dir / "bad.jsonl", lines);
    PrepareOptions opt;
    opt.inputs = {dir / "bad.jsonl"};
    opt.output_dir = dir / "out";
    opt.samples_per_shard = 2;  // two shards are finished before the bad line
    const auto tok = make_byte_tokenizer();
    try {
        prepare_dataset(opt, *tok, Logger());
        FAIL() << "malformed line accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bad.jsonl:6"), std::string::npos) << e.what();
    }
    EXPECT_TRUE(list_shards(opt.output_dir).empty());
    EXPECT_FALSE(fs::exists(dir / ".out.dflash-partial"));
}

TEST(Prepare, AFailedOverwriteLeavesTheOldDatasetIntact) {
    test::TempDir dir("prep");
    write_file(dir / "good.jsonl", kJsonl);
    std::string bad;
    for (int i = 0; i < 5; ++i) bad += "{\"text\": \"new sample " + std::to_string(i) + "\"}\n";
    write_file(dir / "bad.jsonl", bad + "{\"text\": oops}\n");
    const auto tok = make_byte_tokenizer();
    PrepareOptions opt;
    opt.inputs = {dir / "good.jsonl"};
    opt.output_dir = dir / "out";
    opt.samples_per_shard = 1;
    ASSERT_EQ(prepare_dataset(opt, *tok, Logger()).shards, 3);
    const std::string manifest_before = test::read_file(dir / "out" / kManifestFile);
    const std::string shard_before = test::read_file(dir / "out" / "shard-00000.dfshard");

    // The bad line comes after five shards of the new dataset were written.
    opt.inputs = {dir / "bad.jsonl"};
    opt.overwrite = true;
    EXPECT_TRUE(
        test::has(test::error_of([&] { prepare_dataset(opt, *tok, Logger()); }), "bad.jsonl:6"));
    EXPECT_EQ(test::read_file(dir / "out" / kManifestFile), manifest_before);
    EXPECT_EQ(test::read_file(dir / "out" / "shard-00000.dfshard"), shard_before);
    EXPECT_EQ(list_shards(dir / "out").size(), 3u);
    const DatasetCheck check = verify_dataset(dir / "out");
    EXPECT_TRUE(check.ok()) << check.problems.front();
    EXPECT_FALSE(fs::exists(dir / ".out.dflash-partial"));
}

TEST(Prepare, ASecondWriterIsRefusedWithTheHoldersPid) {
    test::TempDir dir("prep");
    write_file(dir / "a.jsonl", kJsonl);
    PrepareOptions opt;
    opt.inputs = {dir / "a.jsonl"};
    opt.output_dir = dir / "out";
    const DirLock held = DirLock::acquire(dir / "out", "dataset directory", "another prepare");
    const auto tok = make_byte_tokenizer();
    const std::string e = test::error_of([&] { prepare_dataset(opt, *tok, Logger()); });
    EXPECT_TRUE(test::has(e, fmt::format("pid {} (another prepare)", ::getpid()))) << e;
    EXPECT_TRUE(list_shards(dir / "out").empty());
}

TEST(Prepare, RejectsInputsWithNothingToTrainOn) {
    test::TempDir dir("prep");
    write_file(dir / "a.jsonl", "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]}\n");
    PrepareOptions opt;
    opt.inputs = {dir / "a.jsonl"};
    opt.output_dir = dir / "out";
    const auto tok = make_byte_tokenizer();
    EXPECT_THROW(prepare_dataset(opt, *tok, Logger()), Error);
    opt.inputs = {dir / "missing.jsonl"};
    EXPECT_THROW(prepare_dataset(opt, *tok, Logger()), Error);
}

// A record holding a 10 MB run of whitespace once failed the whole `data prepare --model` with
// PCRE2's "match limit exceeded" and no file:line. It is now split as HF splits it, and the shard
// holds what the tokenizer gives for the text.
TEST(Prepare, ARecordWithTenMegabytesOfWhitespaceIsTokenized) {
    test::TempDir dir("prep");
    const std::string text = "a" + std::string(10 << 20, ' ') + "b";
    write_file(dir / "ws.jsonl", nlohmann::json{{"text", text}}.dump() + "\n");
    const auto tok = load_hf_tokenizer(DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/qwen2", {});
    PrepareOptions opt;
    opt.inputs = {dir / "ws.jsonl"};
    opt.output_dir = dir / "out";
    const PrepareStats st = prepare_dataset(opt, *tok, Logger());
    EXPECT_EQ(st.samples, 1);
    const ShardedDataset ds = ShardedDataset::open(opt.output_dir);
    const auto sample = ds.sample(0);
    EXPECT_EQ(tok->decode(sample.tokens).substr(0, text.size()), text);
}

}  // namespace
}  // namespace dflash

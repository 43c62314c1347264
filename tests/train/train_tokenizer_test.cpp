// `dflash train` uses the target's own tokenizer and never falls back to another: a target with
// an HF tokenizer.json trains on data prepared with it (mask id past the tokenizer's ids, chat
// loss mask on replies only); a target that names no tokenizer, one whose tokenizer.json dflash
// cannot read, or data made by another tokenizer are refused, each saying what to do.
#include <gtest/gtest.h>

#include <fstream>

#include "data/dataset.h"
#include "data/prepare.h"
#include "support/test_util.h"
#include "tokenizer/hf_tokenizer.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
const std::string kQwenTok = DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/qwen2";

// The tiny target of train_fixtures.h with the vocabulary of the Qwen-style fixture tokenizer
// (padded to a multiple of 64 rows with some to spare, as HF models pad) and its tokenizer files.
void write_hf_target(const fs::path& dir) {
    test::write_tiny_target(dir);
    fs::remove(dir / kTokenizerSpecFile);
    auto c = TargetConfig::load(dir);
    const auto tok = load_hf_tokenizer(kQwenTok, {});
    c.vocab_size = (tok->vocab_size() + 64) / 64 * 64;  // padded, with rows to spare
    c.bos_token_id = -1;
    c.eos_token_id = tok->specials().eos;
    TargetModel::random(test::host_backend(), c, 7, 0.2f).save(dir);
    save_tokenizer_spec(dir, *tok);
}

std::string train_error(const fs::path& dir) {
    return test::error_of([&] {
        train_drafter_from_settings(test::drafter_job(dir, "out"), test::drafter_settings(),
                                    Logger());
    });
}

TEST(TrainTokenizer, TrainsWithTheTargetsHfTokenizer) {
    test::TempDir dir("train_hf_tok");
    write_hf_target(dir / "target");
    std::ofstream(dir / "chats.jsonl")
        << R"({"messages": [{"role": "user", "content": "Say the pattern."}, {"role": "assistant", "content": "abcde abcde abcde abcde abcde"}]})"
        << "\n"
        << R"({"prompt": "Again?", "response": "bcdea bcdea bcdea bcdea bcdea"})"
        << "\n";
    const auto tok = load_tokenizer_for_model(dir / "target");
    PrepareOptions po;
    po.inputs = {dir / "chats.jsonl"};
    po.output_dir = dir / "data";
    prepare_dataset(po, *tok, Logger());
    const ShardedDataset ds = ShardedDataset::open(dir / "data");
    EXPECT_EQ(ds.tokenizer_name(), tok->name());
    const auto s =
        train_drafter_from_settings(test::drafter_job(dir.path(), "out"),
                                    test::drafter_settings({{"train.max_steps", "2"}}), Logger());
    EXPECT_EQ(s.steps, 2);
    const DrafterModel d = DrafterModel::load(test::host_backend(), s.model_dir);
    EXPECT_EQ(d.config().mask_token_id, tok->vocab_size());  // the first row past the tokenizer
    for (int64_t id : d.config().target_layer_ids) EXPECT_LT(id, 4);  // never the last layer
}

TEST(TrainTokenizer, RefusesTargetsWithoutAUsableTokenizer) {
    test::TempDir dir("train_no_tok");
    test::write_pattern_dataset(dir / "data", 4, 1);
    test::write_tiny_target(dir / "target");
    fs::remove(dir / "target" / kTokenizerSpecFile);
    std::string err = train_error(dir.path());
    EXPECT_TRUE(test::has(err, "names no tokenizer")) << err;

    // An HF tokenizer.json dflash cannot read: refused with the reason, not replaced by bytes.
    std::ofstream(dir / "target" / "tokenizer.json") << R"({"model": {"type": "Unigram"}})";
    err = train_error(dir.path());
    EXPECT_TRUE(test::has(err, "cannot be used")) << err;
    EXPECT_TRUE(test::has(err, "Unigram")) << err;

    // A usable tokenizer.json, but the data was tokenized by the byte tokenizer.
    write_hf_target(dir / "target");
    err = train_error(dir.path());
    EXPECT_TRUE(test::has(err, "data was tokenized with 'byte'")) << err;
    EXPECT_TRUE(test::has(err, "dflash data prepare --model")) << err;
}

TEST(TrainTokenizer, TheBinaryRefusesTooAndSaysWhy) {
    test::TempDir dir("train_cli_tok");
    test::write_pattern_dataset(dir / "data", 4, 1);
    test::write_tiny_target(dir / "target");
    fs::remove(dir / "target" / kTokenizerSpecFile);
    std::ofstream(dir / "target" / "tokenizer.json") << R"({"model": {"type": "WordPiece"}})";
    const auto r = test::run_dflash("train --target " + (dir / "target").string() + " --data " +
                                    (dir / "data").string() + " --output " +
                                    (dir / "out").string() + " --runtime.threads 1");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(test::has(r.output, "tokenizer cannot be used")) << r.output;
    EXPECT_TRUE(test::has(r.output, "WordPiece")) << r.output;
    EXPECT_FALSE(fs::exists(dir / "out" / "metrics.jsonl"));
}

}  // namespace
}  // namespace dflash

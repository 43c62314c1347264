// A model directory names its tokenizer (dflash_tokenizer.json or an HF tokenizer.json); missing or
// unreadable tokenizers give clear errors.
#include <fstream>

#include "support/test_util.h"
#include "tokenizer/model_tokenizer.h"

namespace dflash {
namespace {

TEST(ModelTokenizer, RoundTripAndErrors) {
    test::TempDir dir("tok");
    EXPECT_FALSE(has_tokenizer_spec(dir.path()));
    EXPECT_THROW(load_tokenizer_for_model(dir.path()), Error);
    auto byte = make_byte_tokenizer();
    save_tokenizer_spec(dir.path(), *byte);
    auto back = load_tokenizer_for_model(dir.path());
    EXPECT_EQ(back->name(), byte->name());
    EXPECT_EQ(back->vocab_size(), byte->vocab_size());

    // No tokenizer at all: the error says how to go on without one.
    test::TempDir none("none");
    EXPECT_NE(test::error_of([&] { load_tokenizer_for_model(none.path()); }).find("--prompt-ids"),
              std::string::npos);

    // An HF tokenizer.json is read; one dflash cannot read is an error naming the directory,
    // never a fallback to the byte tokenizer.
    test::TempDir hf("hf");
    std::ofstream(hf / "tokenizer.json") << "{}";
    EXPECT_TRUE(has_tokenizer_spec(hf.path()));
    const std::string err = test::error_of([&] { load_tokenizer_for_model(hf.path()); });
    EXPECT_NE(err.find(hf.path().string()), std::string::npos) << err;
    EXPECT_NE(err.find("BPE"), std::string::npos) << err;
    const auto qwen = load_tokenizer_for_model(DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/qwen2");
    EXPECT_TRUE(qwen->name().starts_with("hf-bpe:"));
}

}  // namespace
}  // namespace dflash

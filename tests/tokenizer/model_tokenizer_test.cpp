// A model directory names its tokenizer (dflash_tokenizer.json or an HF tokenizer.json); missing or
// unreadable tokenizers give clear errors: a tokenizer.json that is a directory, a symlink to
// /dev/zero or a FIFO is refused at once (not parsed as "not valid JSON", read without end, or
// waited on); a chat.template the byte tokenizer cannot apply is an error, not ignored.
#include <sys/stat.h>

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

TEST(ModelTokenizer, TokenizerFilesMustBeRegularFiles) {
    test::TempDir dir("tok");
    std::filesystem::create_directories(dir / "isdir" / "tokenizer.json");
    std::string e = test::error_of([&] { load_tokenizer_for_model(dir / "isdir"); });
    EXPECT_TRUE(test::has(e, "tokenizer.json' is a directory, not a regular file")) << e;
    EXPECT_FALSE(test::has(e, "not valid JSON")) << e;

    std::filesystem::create_directories(dir / "zero");
    std::filesystem::create_symlink("/dev/zero", dir / "zero" / "tokenizer.json");
    e = test::error_of([&] { load_tokenizer_for_model(dir / "zero"); });
    EXPECT_TRUE(test::has(e, "(-> '/dev/zero') is a character device")) << e;

    // A FIFO: the open does not wait for a writer (a hang here would time the test out).
    std::filesystem::create_directories(dir / "fifo");
    ASSERT_EQ(::mkfifo((dir / "fifo" / "tokenizer.json").c_str(), 0644), 0);
    e = test::error_of([&] { load_tokenizer_for_model(dir / "fifo"); });
    EXPECT_TRUE(test::has(e, "is a FIFO")) << e;

    // tokenizer_config.json and the byte tokenizer's spec go through the same check.
    std::filesystem::create_directories(dir / "cfg");
    std::filesystem::copy_file(DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/qwen2/tokenizer.json",
                               dir / "cfg" / "tokenizer.json");
    std::filesystem::create_symlink("/dev/zero", dir / "cfg" / "tokenizer_config.json");
    e = test::error_of([&] { load_tokenizer_for_model(dir / "cfg"); });
    EXPECT_TRUE(test::has(e, "tokenizer_config.json' (-> '/dev/zero') is a character device")) << e;
    std::filesystem::create_directories(dir / "spec" / kTokenizerSpecFile);
    e = test::error_of([&] { load_tokenizer_for_model(dir / "spec"); });
    EXPECT_TRUE(test::has(e, "is a directory")) << e;
}

TEST(ModelTokenizer, AChatTemplateTheByteTokenizerCannotApplyIsAnError) {
    test::TempDir dir("tok");
    save_tokenizer_spec(dir.path(), *make_byte_tokenizer());
    ChatOptions chat;
    EXPECT_EQ(load_tokenizer_for_model(dir.path(), chat)->name(), "byte");  // auto: fine
    chat.template_name = "qwen3";
    const std::string e = test::error_of([&] { load_tokenizer_for_model(dir.path(), chat); });
    EXPECT_TRUE(test::has(e, "chat.template = qwen3 cannot apply")) << e;
    EXPECT_TRUE(test::has(e, kTokenizerSpecFile)) << e;
    EXPECT_TRUE(test::has(test::error_of([&] { make_tokenizer_with_chat("byte", chat, "x"); }),
                          "the byte tokenizer"));
    chat.template_name = "auto";
    EXPECT_EQ(make_tokenizer_with_chat("byte", chat, "x")->name(), "byte");
}

}  // namespace
}  // namespace dflash

// A model directory names its tokenizer; missing or HF-only directories give clear errors.
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

    test::TempDir hf("hf");
    std::ofstream(hf / "tokenizer.json") << "{}";
    try {
        load_tokenizer_for_model(hf.path());
        FAIL();
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("--prompt-ids"), std::string::npos);
    }
}

}  // namespace
}  // namespace dflash

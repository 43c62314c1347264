// Default stop tokens (src/infer/stop_tokens.h): every eos id of config.json and
// generation_config.json, then the tokenizer's eos and end_turn and its chat template's other stops
// (harmony), without duplicates; without a tokenizer only the config's.
#include "infer/stop_tokens.h"

#include <gtest/gtest.h>

#include "support/tiny_models.h"
#include "tokenizer/hf_tokenizer.h"

namespace dflash {
namespace {

TEST(StopTokens, ConfigThenTokenizerWithoutDuplicates) {
    auto tc = test::tiny_target_config();
    tc.vocab_size = 300;
    tc.eos_token_id = 2;
    auto tok = make_byte_tokenizer();
    const auto stop = default_stop_tokens(tc, tok.get());
    EXPECT_EQ(stop, (std::vector<int32_t>{2, tok->specials().eos, tok->specials().end_turn}));
    tc.eos_token_id = tok->specials().eos;
    EXPECT_EQ(default_stop_tokens(tc, tok.get()).size(), 2u);
    EXPECT_EQ(default_stop_tokens(tc, nullptr), (std::vector<int32_t>{tok->specials().eos}));
    // Every id of config.json's eos list and of generation_config.json's.
    tc.extra_eos_token_ids = {5};
    tc.generation_eos_token_ids = {6, tok->specials().eos};
    EXPECT_EQ(default_stop_tokens(tc, nullptr), (std::vector<int32_t>{tok->specials().eos, 5, 6}));
}

// gpt-oss: generation_config.json's eos list is [200002, 199999, 200012]; the harmony template
// alone (a config without eos) gives all three as well.
TEST(StopTokens, HarmonyTemplateStopsAtReturnCallAndEndOfText) {
    auto tc = test::tiny_target_config();
    tc.vocab_size = 201088;
    tc.eos_token_id = -1;
    const auto tok =
        load_hf_tokenizer(DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/o200k", ChatOptions{});
    ASSERT_EQ(tok->chat_template_name(), "harmony");
    EXPECT_EQ(default_stop_tokens(tc, tok.get()), (std::vector<int32_t>{200002, 200012, 199999}));
    tc.eos_token_id = 200002;
    tc.generation_eos_token_ids = {200002, 199999, 200012};
    EXPECT_EQ(default_stop_tokens(tc, tok.get()), (std::vector<int32_t>{200002, 199999, 200012}));
}

TEST(StopTokens, IdsOutsideTheVocabularyAreDropped) {
    auto tc = test::tiny_target_config();
    tc.vocab_size = 10;
    tc.eos_token_id = 12;
    EXPECT_TRUE(default_stop_tokens(tc, nullptr).empty());
    tc.eos_token_id = -1;
    EXPECT_TRUE(default_stop_tokens(tc, nullptr).empty());
}

}  // namespace
}  // namespace dflash

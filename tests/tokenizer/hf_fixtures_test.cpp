// The fixtures of tests/fixtures/tokenizer/{qwen2,llama3,o200k}: a Qwen2/Qwen3-style (NFC,
// one-digit split), a Llama-3-style (three-digit split, ignore_merges, bos by the post-processor)
// and a gpt-oss-style (o200k split, ignore_merges, the harmony specials at gpt-oss's ids)
// tokenizer.json, and the ids, decoded text and chat renderings an independent implementation gave
// for the awkward strings and chats of tools/reference/tokenizer_cases.json. expected.json names
// that implementation (HF `tokenizers` + transformers when made by
// tools/reference/make_tokenizer_fixtures.py, tokenizers.js when made by
// tools/js/make_tokenizer_fixtures.mjs). dflash must agree on every case.
#include <map>
#include <nlohmann/json.hpp>

#include "infer/prompts.h"
#include "support/test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"

namespace dflash {
namespace {

using nlohmann::json;
const std::string kFixtures = DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/";

std::string unhex(const std::string& hex) {
    std::string out;
    for (size_t i = 0; i + 1 < hex.size(); i += 2)
        out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    return out;
}

std::string case_text(const json& c) {
    return c.contains("text_hex") ? unhex(c["text_hex"].get<std::string>())
                                  : c["text"].get<std::string>();
}

json expected_of(const std::string& fixture) {
    return json::parse(test::read_file(kFixtures + fixture + "/expected.json"));
}

class HfFixtures : public ::testing::TestWithParam<std::string> {
  protected:
    json expected() const { return expected_of(GetParam()); }
};
using HfChatFixtures = HfFixtures;

TEST_P(HfFixtures, TextsEncodeAndDecodeLikeTheReference) {
    const json e = expected();
    const auto tok = load_hf_tokenizer(kFixtures + GetParam(), ChatOptions{});
    std::cout << GetParam() << ": expected ids from " << e["producer"].get<std::string>() << "\n";
    ASSERT_GE(e["texts"].size(), 20u);
    for (const auto& c : e["texts"]) {
        const std::string name = c["name"];
        const std::string text = case_text(c);
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok->encode(text), ids) << "case " << name;
        EXPECT_EQ(encode_text_prompt(*tok, text), c["prompt_ids"].get<std::vector<int32_t>>())
            << "case " << name << " with the post-processor's tokens";
        EXPECT_EQ(utf8_lossy(tok->decode(ids)), c["decoded"].get<std::string>()) << "case " << name;
    }
}

// The chat options a case sets, as the reference rendered it with them.
ChatOptions chat_options_of(const json& c) {
    ChatOptions o;
    o.template_name = c["template"];
    if (c.contains("enable_thinking")) o.enable_thinking = c["enable_thinking"];
    if (c.contains("reasoning_effort")) o.reasoning_effort = c["reasoning_effort"];
    if (c.contains("current_date")) o.current_date = c["current_date"];
    return o;
}

std::vector<ChatMessage> messages_of(const json& c) {
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"])
        msgs.push_back({m["role"], m["content"], m.value("thinking", std::string())});
    return msgs;
}

TEST_P(HfChatFixtures, ChatsRenderAndEncodeLikeTheReference) {
    const json e = expected();
    ASSERT_GE(e["chats"].size(), 3u);
    for (const auto& c : e["chats"]) {
        const ChatOptions o = chat_options_of(c);
        const auto tok = load_hf_tokenizer(kFixtures + GetParam(), o);
        const std::vector<ChatMessage> msgs = messages_of(c);
        const bool gen = c["add_generation_prompt"];
        const auto tmpl = make_chat_template(o.template_name, o, "<|begin_of_text|>");
        EXPECT_EQ(chat_text(tmpl->render(msgs, gen)), c["text"].get<std::string>())
            << "chat " << c["name"];
        const Encoded enc = tok->encode_chat(msgs, gen);
        EXPECT_EQ(enc.tokens, c["ids"].get<std::vector<int32_t>>()) << "chat " << c["name"];
        EXPECT_EQ(tok->decode(enc.tokens), c["text"].get<std::string>()) << "chat " << c["name"];
    }
}

// The issue that asked for these fixtures asked for the `tokenizers` library's answers, not
// another port's: a regenerated set from elsewhere must say so here first. The o200k set was
// made on the development machine (no Python `tokenizers` there) with tokenizers.js; it is
// accepted from that producer until tools/reference/make_tokenizer_fixtures.py has been run for
// it on the GPU machine, and from HF `tokenizers` after.
TEST_P(HfFixtures, ExpectedValuesComeFromHfTokenizers) {
    const std::string producer = expected()["producer"].get<std::string>();
    const bool hf = producer.rfind("HF tokenizers ", 0) == 0;
    const bool interim_js = GetParam() == "o200k" && producer.rfind("tokenizers.js ", 0) == 0;
    EXPECT_TRUE(hf || interim_js) << producer;
}

// qwen2 and llama3 keep the template in tokenizer_config.json, o200k in chat_template.jinja.
TEST_P(HfChatFixtures, TokenizerConfigTemplateIsRecognised) {
    const auto tok = load_hf_tokenizer(kFixtures + GetParam(), ChatOptions{});
    const std::map<std::string, std::string> want = {
        {"qwen2", "qwen3"}, {"llama3", "llama3.1"}, {"o200k", "harmony"}};
    EXPECT_EQ(tok->chat_template_name(), want.at(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfFixtures, ::testing::Values("qwen2", "llama3", "o200k"));
INSTANTIATE_TEST_SUITE_P(Tokenizers, HfChatFixtures, ::testing::Values("qwen2", "llama3", "o200k"));

// gpt-oss's named specials, at the ids its tokenizer.json gives them.
const std::vector<std::pair<std::string, int32_t>> kHarmonySpecials = {
    {"<|startoftext|>", 199998}, {"<|endoftext|>", 199999}, {"<|return|>", 200002},
    {"<|constrain|>", 200003},   {"<|channel|>", 200005},   {"<|start|>", 200006},
    {"<|end|>", 200007},         {"<|message|>", 200008},   {"<|call|>", 200012},
    {"<|endofprompt|>", 200018}};

TEST(O200kFixture, SpecialsKeepGptOssIds) {
    const auto tok = load_hf_tokenizer(kFixtures + "o200k", ChatOptions{});
    for (const auto& [text, id] : kHarmonySpecials) {
        EXPECT_EQ(tok->encode(text), std::vector<int32_t>{id}) << text;
        EXPECT_EQ(tok->decode(std::vector<int32_t>{id}), text);
    }
    EXPECT_EQ(tok->vocab_size(), 200019);
    EXPECT_EQ(tok->specials().bos, -1);  // gpt-oss's post-processor adds nothing
    EXPECT_EQ(tok->specials().eos, 200002);
    EXPECT_EQ(tok->specials().pad, 199999);
}

// The fixture also writes the specials into the BPE vocabulary, because HF `tokenizers` would
// otherwise re-number them from the small vocabulary's size (see make_tokenizer_fixtures.mjs).
// gpt-oss's own file lists them only as added tokens; that layout must give the same ids.
TEST(O200kFixture, SpecialsOnlyAsAddedTokensGiveTheSameIds) {
    json tj = json::parse(test::read_file(kFixtures + "o200k/tokenizer.json"));
    for (const auto& [text, id] : kHarmonySpecials) {
        ASSERT_TRUE(tj["model"]["vocab"].contains(text)) << text;
        tj["model"]["vocab"].erase(text);
    }
    HfTokenizerFiles files;
    files.tokenizer_json = tj.dump();
    files.tokenizer_config_json = test::read_file(kFixtures + "o200k/tokenizer_config.json");
    files.origin = "o200k without specials in the vocabulary";
    const auto tok = make_hf_tokenizer(std::move(files), ChatOptions{});
    for (const auto& c : expected_of("o200k")["texts"]) {
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok->encode(case_text(c)), ids) << "case " << c["name"];
        EXPECT_EQ(utf8_lossy(tok->decode(ids)), c["decoded"].get<std::string>())
            << "case " << c["name"];
    }
}

// The fixture's vocabulary holds " JSONParser" with no merges that build it; the reference's ids
// for it are one token only because of ignore_merges, so the case above tests that rule.
TEST(O200kFixture, IgnoreMergesDecidesTheWholeWordCase) {
    json tj = json::parse(test::read_file(kFixtures + "o200k/tokenizer.json"));
    ASSERT_TRUE(tj["model"]["ignore_merges"].get<bool>());
    HfTokenizerFiles files;
    files.origin = "o200k";
    files.tokenizer_json = tj.dump();
    const auto with = make_hf_tokenizer(files, ChatOptions{});
    tj["model"]["ignore_merges"] = false;
    files.tokenizer_json = tj.dump();
    const auto without = make_hf_tokenizer(files, ChatOptions{});
    EXPECT_EQ(with->encode(" JSONParser").size(), 1u);
    EXPECT_GT(without->encode(" JSONParser").size(), 1u);
}

// Harmony's loss mask on tokens: in a training conversation, every token the model writes after
// "<|start|>assistant" (channel headers, the last turn's analysis, the final text, <|return|>)
// is 1, and nothing of the system, developer and user turns is.
TEST(O200kFixture, HarmonyLossMaskCoversTheRepliesOnly) {
    const json e = expected_of("o200k");
    const json* chat = nullptr;
    for (const auto& c : e["chats"])
        if (c["name"] == "harmony_multi_turn_drops_analysis") chat = &c;
    ASSERT_NE(chat, nullptr);
    const auto tok = load_hf_tokenizer(kFixtures + "o200k", chat_options_of(*chat));
    const Encoded enc = tok->encode_chat(messages_of(*chat), false);
    std::vector<int32_t> replies;
    for (size_t i = 0; i < enc.tokens.size(); ++i)
        if (enc.loss_mask[i]) replies.push_back(enc.tokens[i]);
    EXPECT_EQ(tok->decode(replies),
              "<|channel|>final<|message|>Blue.<|end|>"
              "<|channel|>analysis<|message|>Pick a different one \U0001F600<|end|>"
              "<|start|>assistant<|channel|>final<|message|>Red \U0001F600\n<|return|>");
}

// What ends a gpt-oss reply: <|return|> (the template's end of turn and the tokenizer's eos),
// then <|call|> and <|endoftext|>.
TEST(O200kFixture, HarmonyStopTokens) {
    const auto tok = load_hf_tokenizer(kFixtures + "o200k", ChatOptions{});
    EXPECT_EQ(tok->specials().end_turn, 200002);
    EXPECT_EQ(tok->stop_tokens(), (std::vector<int32_t>{200002, 200012, 199999}));
}

}  // namespace
}  // namespace dflash

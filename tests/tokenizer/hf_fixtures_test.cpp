// The fixtures of tests/fixtures/tokenizer/{qwen2,llama3,o200k,qwen35}: a Qwen2/Qwen3-style (NFC,
// one-digit split), a Llama-3-style (three-digit split, ignore_merges, bos by the post-processor),
// a gpt-oss-style (o200k split, ignore_merges, the harmony specials at gpt-oss's ids) and a
// Qwen3.5-style (NFC, its split with combining marks in words, ChatML specials at Qwen3.5's ids,
// the qwen3_5 chat template) tokenizer.json, and the ids, decoded text and chat renderings an
// independent implementation gave for the awkward strings and chats of
// tools/reference/tokenizer_cases.json. expected.json names that implementation (HF `tokenizers` +
// transformers when made by tools/reference/make_tokenizer_fixtures.py, tokenizers.js when made by
// tools/js/make_tokenizer_fixtures.mjs). dflash must agree on every case.
#include <map>
#include <nlohmann/json.hpp>

#include "infer/prompts.h"
#include "support/test_util.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/regex_split.h"

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
        {"qwen2", "qwen3"}, {"llama3", "llama3.1"}, {"o200k", "harmony"}, {"qwen35", "qwen3_5"}};
    EXPECT_EQ(tok->chat_template_name(), want.at(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfFixtures,
                         ::testing::Values("qwen2", "llama3", "o200k", "qwen35"));
INSTANTIATE_TEST_SUITE_P(Tokenizers, HfChatFixtures,
                         ::testing::Values("qwen2", "llama3", "o200k", "qwen35"));

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
    const json expected = expected_of("o200k");  // kept: a range over a temporary's member dangles
    for (const auto& c : expected["texts"]) {
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

// Qwen3.5's added tokens at its ids: the ChatML specials, and <think> / </think> (not special).
const std::vector<std::pair<std::string, int32_t>> kQwen35Added = {{"<|endoftext|>", 248044},
                                                                   {"<|im_start|>", 248045},
                                                                   {"<|im_end|>", 248046},
                                                                   {"<think>", 248068},
                                                                   {"</think>", 248069}};

TEST(Qwen35Fixture, AddedTokensKeepQwen35Ids) {
    const auto tok = load_hf_tokenizer(kFixtures + "qwen35", ChatOptions{});
    for (const auto& [text, id] : kQwen35Added) {
        EXPECT_EQ(tok->encode(text), std::vector<int32_t>{id}) << text;
        EXPECT_EQ(tok->decode(std::vector<int32_t>{id}), text);
    }
    EXPECT_EQ(tok->vocab_size(), 248070);
    EXPECT_EQ(tok->specials().bos, -1);  // Qwen adds no bos
    EXPECT_EQ(tok->specials().eos, 248046);
    EXPECT_EQ(tok->specials().pad, 248044);
    EXPECT_EQ(tok->specials().end_turn, 248046);
    // As in o200k, the ids also sit in the fixture's BPE vocabulary; Qwen3.5's own file lists
    // them only as added tokens, which must give the same ids.
    json tj = json::parse(test::read_file(kFixtures + "qwen35/tokenizer.json"));
    for (const auto& [text, id] : kQwen35Added) tj["model"]["vocab"].erase(text);
    HfTokenizerFiles files;
    files.tokenizer_json = tj.dump();
    files.tokenizer_config_json = test::read_file(kFixtures + "qwen35/tokenizer_config.json");
    files.origin = "qwen35 without added tokens in the vocabulary";
    const auto added_only = make_hf_tokenizer(std::move(files), ChatOptions{});
    const json expected = expected_of("qwen35");  // kept: a range over a temporary's member dangles
    for (const auto& c : expected["texts"])
        EXPECT_EQ(added_only->encode(case_text(c)), c["ids"].get<std::vector<int32_t>>())
            << "case " << c["name"];
}

// The file carries NFC and Qwen3.5's pattern, and both decide cases of the fixture: without the
// normaliser a decomposed accent stays two characters, and Qwen2's pattern in place of
// Qwen3.5's cuts words at combining marks, so the reference's ids are not reproduced.
TEST(Qwen35Fixture, NfcAndTheQwen35PatternDecideCases) {
    const json tj = json::parse(test::read_file(kFixtures + "qwen35/tokenizer.json"));
    EXPECT_EQ(tj["normalizer"]["type"], "NFC");
    ASSERT_EQ(tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"].get<std::string>(),
              kQwen35SplitPattern);
    const auto variant = [&](const char* what, const json& normalizer, std::string_view pattern) {
        json v = tj;
        v["normalizer"] = normalizer;
        v["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = std::string(pattern);
        HfTokenizerFiles files;
        files.tokenizer_json = v.dump();
        files.origin = what;
        return make_hf_tokenizer(std::move(files), ChatOptions{});
    };
    const auto no_nfc = variant("qwen35 without NFC", json(), kQwen35SplitPattern);
    const auto qwen2_split =
        variant("qwen35 with Qwen2's split", tj["normalizer"], kQwen2SplitPattern);
    std::map<std::string, json> cases;
    const json expected = expected_of("qwen35");
    for (const auto& c : expected["texts"]) cases[c["name"].get<std::string>()] = c;
    ASSERT_EQ(cases.count("qwen35_nfc_composition"), 1u);
    ASSERT_EQ(cases.count("qwen35_combining_marks"), 1u);
    const json& nfc = cases["qwen35_nfc_composition"];
    EXPECT_NE(no_nfc->encode(case_text(nfc)), nfc["ids"].get<std::vector<int32_t>>());
    const json& marks = cases["qwen35_combining_marks"];
    EXPECT_NE(qwen2_split->encode(case_text(marks)), marks["ids"].get<std::vector<int32_t>>());
}

// Qwen3.5's loss mask: in a thinking training turn the "<think>\n" that its generation prompt
// opens is the prompt's, the reasoning and the answer through <|im_end|> are the model's.
TEST(Qwen35Fixture, LossMaskLeavesTheOpenedThinkBlockToThePrompt) {
    const json e = expected_of("qwen35");
    const json* chat = nullptr;
    for (const auto& c : e["chats"])
        if (c["name"] == "qwen35_train_thinking_on") chat = &c;
    ASSERT_NE(chat, nullptr);
    const auto tok = load_hf_tokenizer(kFixtures + "qwen35", chat_options_of(*chat));
    const Encoded enc = tok->encode_chat(messages_of(*chat), false);
    std::vector<int32_t> replies;
    for (size_t i = 0; i < enc.tokens.size(); ++i)
        if (enc.loss_mask[i]) replies.push_back(enc.tokens[i]);
    EXPECT_EQ(tok->decode(replies), "17 + 25 = 42.\n</think>\n\n42<|im_end|>");
}

}  // namespace
}  // namespace dflash

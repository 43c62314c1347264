// The fixtures of tests/fixtures/tokenizer/{qwen2,llama3}: a Qwen2/Qwen3-style (NFC, one-digit
// split) and a Llama-3-style (three-digit split, ignore_merges, bos by the post-processor)
// tokenizer.json, and the ids, decoded text and chat renderings an independent implementation gave
// for the awkward strings and chats of tools/reference/tokenizer_cases.json. expected.json names
// that implementation (HF `tokenizers` + transformers when made by
// tools/reference/make_tokenizer_fixtures.py, tokenizers.js when made by
// tools/js/make_tokenizer_fixtures.mjs). dflash must agree on every case.
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

class HfFixtures : public ::testing::TestWithParam<std::string> {
  protected:
    json expected() const {
        return json::parse(test::read_file(kFixtures + GetParam() + "/expected.json"));
    }
};

TEST_P(HfFixtures, TextsEncodeAndDecodeLikeTheReference) {
    const json e = expected();
    const auto tok = load_hf_tokenizer(kFixtures + GetParam(), ChatOptions{});
    std::cout << GetParam() << ": expected ids from " << e["producer"].get<std::string>() << "\n";
    ASSERT_GE(e["texts"].size(), 20u);
    for (const auto& c : e["texts"]) {
        const std::string name = c["name"];
        const std::string text = c.contains("text_hex") ? unhex(c["text_hex"].get<std::string>())
                                                        : c["text"].get<std::string>();
        const auto ids = c["ids"].get<std::vector<int32_t>>();
        EXPECT_EQ(tok->encode(text), ids) << "case " << name;
        EXPECT_EQ(encode_text_prompt(*tok, text), c["prompt_ids"].get<std::vector<int32_t>>())
            << "case " << name << " with the post-processor's tokens";
        EXPECT_EQ(utf8_lossy(tok->decode(ids)), c["decoded"].get<std::string>()) << "case " << name;
    }
}

TEST_P(HfFixtures, ChatsRenderAndEncodeLikeTheReference) {
    const json e = expected();
    ASSERT_GE(e["chats"].size(), 3u);
    for (const auto& c : e["chats"]) {
        ChatOptions o;
        o.template_name = c["template"];
        if (c.contains("enable_thinking")) o.enable_thinking = c["enable_thinking"];
        const auto tok = load_hf_tokenizer(kFixtures + GetParam(), o);
        std::vector<ChatMessage> msgs;
        for (const auto& m : c["messages"]) msgs.push_back({m["role"], m["content"]});
        const bool gen = c["add_generation_prompt"];
        const auto tmpl = make_chat_template(o.template_name, o, "<|begin_of_text|>");
        EXPECT_EQ(chat_text(tmpl->render(msgs, gen)), c["text"].get<std::string>())
            << "chat " << c["name"];
        const Encoded enc = tok->encode_chat(msgs, gen);
        EXPECT_EQ(enc.tokens, c["ids"].get<std::vector<int32_t>>()) << "chat " << c["name"];
        EXPECT_EQ(tok->decode(enc.tokens), c["text"].get<std::string>()) << "chat " << c["name"];
    }
}

TEST_P(HfFixtures, TokenizerConfigTemplateIsRecognised) {
    const auto tok = load_hf_tokenizer(kFixtures + GetParam(), ChatOptions{});
    EXPECT_EQ(tok->chat_template_name(), GetParam() == "qwen2" ? "qwen3" : "llama3.1");
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, HfFixtures, ::testing::Values("qwen2", "llama3"));

}  // namespace
}  // namespace dflash

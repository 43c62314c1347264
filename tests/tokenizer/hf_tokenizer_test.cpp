// The HF tokenizer behind the Tokenizer interface, on the fixture tokenizers: specials from
// tokenizer_config.json and the post-processor, added tokens never split, chat loss masks that
// follow the message each token came from, streaming decode across tokens that split a
// character, saving and reloading, a name that identifies the vocabulary, and refusals (naming the
// part) of tokenizer.json pipelines that are not byte-level BPE.
#include <nlohmann/json.hpp>

#include "support/test_util.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/model_tokenizer.h"

namespace dflash {
namespace {

using nlohmann::json;
const std::string kQwen = DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/qwen2";
const std::string kLlama = DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/llama3";

TEST(HfTokenizer, Specials) {
    const auto q = load_hf_tokenizer(kQwen, {});
    const SpecialTokens& s = q->specials();
    const auto id = [&](const char* t) { return q->encode(t).at(0); };
    EXPECT_EQ(s.bos, -1);  // Qwen adds no bos
    EXPECT_EQ(s.eos, id("<|im_end|>"));
    EXPECT_EQ(s.pad, id("<|endoftext|>"));
    EXPECT_EQ(s.end_turn, id("<|im_end|>"));
    EXPECT_EQ(s.mask, -1);
    EXPECT_EQ(s.user, -1);
    EXPECT_EQ(q->vocab_size(), s.pad + 5);  // the added tokens come last
    EXPECT_TRUE(q->name().starts_with("hf-bpe:")) << q->name();

    const auto l = load_hf_tokenizer(kLlama, {});
    EXPECT_EQ(l->specials().bos, l->encode("<|begin_of_text|>").at(0));
    EXPECT_EQ(l->specials().eos, l->encode("<|eot_id|>").at(0));
    EXPECT_EQ(l->specials().end_turn, l->specials().eos);
    EXPECT_NE(l->name(), q->name());
    // Plain text for training: [bos] text [eos] where the tokenizer has them.
    const Encoded t = l->encode_text("hi");
    EXPECT_EQ(t.tokens.front(), l->specials().bos);
    EXPECT_EQ(t.tokens.back(), l->specials().eos);
    EXPECT_EQ(q->encode_text("hi").tokens.front(), q->encode("hi").front());
}

TEST(HfTokenizer, AddedTokensAreNeverSplit) {
    const auto q = load_hf_tokenizer(kQwen, {});
    const auto ids = q->encode("a<think>b</think>");
    ASSERT_EQ(ids.size(), 4u);
    EXPECT_EQ(q->decode(std::vector<int32_t>{ids[1]}), "<think>");
    EXPECT_EQ(q->decode(ids), "a<think>b</think>");
    // Not a token: split like any text.
    EXPECT_GT(q->encode("<|im_end").size(), 1u);
    EXPECT_TRUE(test::has(test::error_of([&] { q->decode(std::vector<int32_t>{99999}); }),
                          "not in the tokenizer's vocabulary"));
}

TEST(HfTokenizer, ChatLossMaskFollowsTheMessages) {
    ChatOptions off;
    off.enable_thinking = false;
    const auto q = load_hf_tokenizer(kQwen, off);
    const Encoded e = q->encode_chat({{"user", "What is it?"}, {"assistant", "A test."}}, false);
    ASSERT_EQ(e.tokens.size(), e.loss_mask.size());
    std::vector<int32_t> masked;
    for (size_t i = 0; i < e.tokens.size(); ++i)
        if (e.loss_mask[i]) masked.push_back(e.tokens[i]);
    EXPECT_EQ(q->decode(masked), "A test.<|im_end|>");
    // The prompt for generation has nothing to learn.
    const Encoded p = q->encode_chat({{"user", "x"}}, true);
    EXPECT_EQ(std::count(p.loss_mask.begin(), p.loss_mask.end(), 1), 0);
    EXPECT_TRUE(q->decode(p.tokens).ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"));

    const auto l = load_hf_tokenizer(kLlama, {});
    const Encoded le = l->encode_chat({{"user", "Q"}, {"assistant", " Sure thing "}}, false);
    masked.clear();
    for (size_t i = 0; i < le.tokens.size(); ++i)
        if (le.loss_mask[i]) masked.push_back(le.tokens[i]);
    EXPECT_EQ(l->decode(masked), "Sure thing<|eot_id|>");
    EXPECT_EQ(le.tokens.front(), l->specials().bos);
}

TEST(HfTokenizer, StreamingDecodeAcrossSplitCharacters) {
    const auto q = load_hf_tokenizer(kQwen, {});
    const std::string text = "\u4f60\u597d \U0001F468\u200d\U0001F469 ok \u00e9";
    const auto ids = q->encode(text);
    StreamDecoder dec(*q);
    std::string joined;
    for (int32_t id : ids) {
        const std::string piece = dec.push(id);
        EXPECT_TRUE(is_valid_utf8(piece));
        joined += piece;
    }
    joined += dec.flush();
    EXPECT_EQ(joined, text);
}

TEST(HfTokenizer, InvalidUtf8IsEncodedAsReplacementCharacters) {
    const auto q = load_hf_tokenizer(kQwen, {});
    EXPECT_EQ(q->encode("a\xff"
                        "b"),
              q->encode("a\uFFFD"
                        "b"));
    EXPECT_EQ(utf8_lossy("\xe2\x82"
                         "A\xed\xa0\x80"),
              "\uFFFDA\uFFFD\uFFFD\uFFFD");
}

TEST(HfTokenizer, SaveAndReloadThroughTheModelDirectory) {
    test::TempDir dir("hf_tok");
    const auto q = load_hf_tokenizer(kQwen, {});
    save_tokenizer_spec(dir.path(), *q);
    EXPECT_TRUE(std::filesystem::exists(dir / "tokenizer.json"));
    EXPECT_TRUE(std::filesystem::exists(dir / "tokenizer_config.json"));
    EXPECT_FALSE(std::filesystem::exists(dir / kTokenizerSpecFile));
    EXPECT_TRUE(has_tokenizer_spec(dir.path()));
    const auto back = load_tokenizer_for_model(dir.path());
    EXPECT_EQ(back->name(), q->name());
    EXPECT_EQ(back->encode("Hello world"), q->encode("Hello world"));
}

// tokenizer.json of the Qwen fixture with one part replaced.
std::string with_part(const char* key, const json& value) {
    json j = json::parse(test::read_file(kQwen + "/tokenizer.json"));
    j[key] = value;
    return j.dump();
}

HfTokenizerFiles files(const std::string& tokenizer_json, const std::string& config,
                       const std::string& jinja = "") {
    HfTokenizerFiles f;
    f.tokenizer_json = tokenizer_json;
    f.tokenizer_config_json = config;
    f.origin = "fixture";
    f.chat_template_jinja = jinja;
    return f;
}

std::string load_error(const std::string& tokenizer_json, const std::string& config = "") {
    return test::error_of([&] { make_hf_tokenizer(files(tokenizer_json, config), {}); });
}

TEST(HfTokenizer, RefusesWhatItCannotReproduce) {
    EXPECT_TRUE(
        test::has(load_error(with_part("normalizer", {{"type", "Lowercase"}})), "normalizer"));
    EXPECT_TRUE(test::has(
        load_error(with_part("pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "_"}})),
        "pre_tokenizer"));
    EXPECT_TRUE(test::has(load_error(with_part("decoder", {{"type", "Metaspace"}})), "decoder"));
    EXPECT_TRUE(test::has(load_error(with_part("post_processor", {{"type", "BertProcessing"}})),
                          "post_processor"));
    const std::string err = load_error("{not json");
    EXPECT_TRUE(test::has(err, "fixture")) << err;
    EXPECT_TRUE(test::has(err, "not valid JSON")) << err;
    EXPECT_TRUE(test::has(load_error(with_part("model", {{"type", "WordPiece"}})), "WordPiece"));
    // A merge whose result is not in the vocabulary is refused at load (as HF `tokenizers` does),
    // the merge named, in either spelling of merges.
    json model = json::parse(test::read_file(kQwen + "/tokenizer.json"))["model"];
    ASSERT_EQ(model["vocab"].count("\u010aQ"), 0u);  // "\nQ" in the byte alphabet
    const size_t rank = model["merges"].size();
    for (const json& merge : {json("\u010a Q"), json::array({"\u010a", "Q"})}) {
        json m = model;
        m["merges"].push_back(merge);
        const std::string e = load_error(with_part("model", m));
        EXPECT_TRUE(test::has(e, fmt::format("merge {} (\"\u010a\" + \"Q\"): \u010aQ is not in the "
                                             "vocab",
                                             rank)))
            << e;
    }
    EXPECT_TRUE(test::has(
        load_error(test::read_file(kQwen + "/tokenizer.json"), R"({"eos_token": "<|nope|>"})"),
        "<|nope|>"));
}

TEST(HfTokenizer, ChatTemplateChoice) {
    const std::string tj = test::read_file(kQwen + "/tokenizer.json");
    // No template in tokenizer_config.json: loading works, applying a template does not.
    const auto none = make_hf_tokenizer(files(tj, "{}"), {});
    EXPECT_EQ(none->chat_template_name(), "none");
    const std::string err = test::error_of([&] { none->encode_chat({{"user", "x"}}, true); });
    EXPECT_TRUE(test::has(err, "no chat_template")) << err;
    EXPECT_TRUE(test::has(err, "chat.template")) << err;
    // A chat_template that is not a string is reported as what it is, not as missing.
    for (const char* cfg : {R"({"chat_template": 5})", R"({"chat_template": [{"name": "x"}]})",
                            R"({"chat_template": [{"name": "default", "template": 5}]})"}) {
        const auto bad = make_hf_tokenizer(files(tj, cfg), {});
        const std::string e = test::error_of([&] { bad->encode_chat({{"user", "x"}}, true); });
        EXPECT_FALSE(test::has(e, "no chat_template")) << cfg << ": " << e;
        EXPECT_TRUE(test::has(e, "chat_template")) << e;
    }
    EXPECT_TRUE(test::has(test::error_of([&] {
                              make_hf_tokenizer(files(tj, R"({"chat_template": 5})"), {})
                                  ->encode_chat({{"user", "x"}}, true);
                          }),
                          "chat_template is a JSON number (5), not a string"));
    EXPECT_EQ(make_hf_tokenizer(files(tj, R"({"chat_template": null})"), {})->chat_template_name(),
              "none");
    // An unknown template is not guessed; chat.template names one explicitly.
    const auto other = make_hf_tokenizer(files(tj, R"({"chat_template": "{{ messages }}"})"), {});
    EXPECT_TRUE(test::has(test::error_of([&] {
                              other->encode_chat({{"user", "x"}}, true);
                          }),
                          "none of those"));
    ChatOptions o;
    o.template_name = "qwen3";
    EXPECT_EQ(make_hf_tokenizer(files(tj, "{}"), o)->chat_template_name(), "qwen3");
    // chat_template.jinja (newer transformers) wins over tokenizer_config.json.
    const std::string jinja =
        test::read_file(DFLASH_SOURCE_DIR "/tools/reference/chat_templates/qwen3.jinja");
    EXPECT_EQ(make_hf_tokenizer(files(tj, R"({"chat_template": "{{ messages }}"})", jinja), {})
                  ->chat_template_name(),
              "qwen3");
    // A Qwen3.5 model directory (config.json's model_type, top level or the text model's) picks
    // qwen3_5 with chat.template = auto even though the Jinja reads as Qwen3's; a named template
    // still wins, and other types leave the choice to the Jinja.
    const std::string qwen3_cfg = test::read_file(kQwen + "/tokenizer_config.json");
    for (const char* type : {"qwen3_5", "qwen3_5_moe_text", "qwen3"}) {
        test::TempDir dir("hf_tok_type");
        test::write_file(dir / "tokenizer.json", tj);
        test::write_file(dir / "tokenizer_config.json", qwen3_cfg);
        test::write_file(dir / "config.json", json{{"model_type", type}}.dump());
        const bool q35 = std::string(type) != "qwen3";
        EXPECT_EQ(load_hf_tokenizer(dir.path(), {})->chat_template_name(),
                  q35 ? "qwen3_5" : "qwen3")
            << type;
        ChatOptions named;
        named.template_name = "qwen3";
        EXPECT_EQ(load_hf_tokenizer(dir.path(), named)->chat_template_name(), "qwen3") << type;
    }
    // A config.json that is not JSON is not the tokenizer's concern.
    {
        test::TempDir dir("hf_tok_badcfg");
        test::write_file(dir / "tokenizer.json", tj);
        test::write_file(dir / "tokenizer_config.json", qwen3_cfg);
        test::write_file(dir / "config.json", "{oops");
        EXPECT_EQ(load_hf_tokenizer(dir.path(), {})->chat_template_name(), "qwen3");
    }
    // A template whose end-of-turn token the vocabulary lacks is the wrong template.
    o.template_name = "llama3.1";
    EXPECT_TRUE(test::has(test::error_of([&] {
                              make_hf_tokenizer(files(tj, R"({"bos_token": "<|endoftext|>"})"), o);
                          }),
                          "<|eot_id|>"));
}

}  // namespace
}  // namespace dflash

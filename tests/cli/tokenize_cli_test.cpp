// `dflash tokenize`: the ids a model sees (one line, space-separated), --decode back to text,
// --chat with the model's template; `dflash data prepare --model` and `dflash generate --chat`
// using the same tokenizer and template; usage errors name the fix.
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "data/dataset.h"
#include "model/target.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "tokenizer/hf_tokenizer.h"
#include "tokenizer/model_tokenizer.h"

namespace dflash {
namespace {

const std::string kQwen = DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/qwen2";
const std::string kLlama = DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/llama3";
const std::string kO200k = DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/o200k";

std::string ids_line(const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + std::to_string(ids[i]);
    return s + "\n";
}

// gpt-oss: the harmony template recognised from chat_template.jinja, its chat.* settings reaching
// the system turn, and an unknown reasoning effort refused with the choices named.
TEST(TokenizeCli, HarmonyChatTakesItsSettings) {
    const auto tok = load_hf_tokenizer(kO200k, {});
    auto r = test::run_dflash("tokenize --model " + kO200k +
                              " --chat Hi --chat.reasoning_effort high --chat.current_date "
                              "2026-01-02");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output,
              ids_line(tok->encode(
                  "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
                  "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2026-01-02\n\nReasoning: "
                  "high\n\n# Valid channels: analysis, commentary, final. Channel must be "
                  "included for every message.<|end|><|start|>user<|message|>Hi<|end|>"
                  "<|start|>assistant")));
    r = test::run_dflash("tokenize --model " + kO200k + " --chat Hi --chat.reasoning_effort max");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(test::has(r.output, "chat.reasoning_effort")) << r.output;
    EXPECT_TRUE(test::has(r.output, "medium")) << r.output;
}

TEST(TokenizeCli, EncodesDecodesAndAppliesTheChatTemplate) {
    const auto llama = load_hf_tokenizer(kLlama, {});
    auto r = test::run_dflash("tokenize --model " + kLlama + " 'Hello world, 123456!'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<int32_t> want{llama->specials().bos};  // what `generate --prompt` feeds the model
    for (int32_t id : llama->encode("Hello world, 123456!")) want.push_back(id);
    EXPECT_EQ(r.output, ids_line(want));

    r = test::run_dflash("tokenize --model " + kLlama + " --decode '" +
                         ids_line(want).substr(0, ids_line(want).size() - 1) + "'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, "<|begin_of_text|>Hello world, 123456!\n");

    const auto qwen = load_hf_tokenizer(kQwen, {});
    r = test::run_dflash("tokenize --model " + kQwen + " --chat Hi --chat.enable_thinking false");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output, ids_line(qwen->encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>"
                                              "assistant\n<think>\n\n</think>\n\n")));
    r = test::run_dflash("tokenize --model " + kQwen + " --decode 1,2,3 --chat");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(test::has(r.output, "--chat applies to TEXT")) << r.output;
    r = test::run_dflash("tokenize --model " + kQwen);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(test::has(r.output, "exactly one of TEXT")) << r.output;
    // `--decode ""` once encoded an empty TEXT and exited 0: no ids is an error.
    r = test::run_dflash("tokenize --model " + kQwen + " --decode ''");
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(test::has(r.output, "dflash: error: --decode got no ids")) << r.output;
    r = test::run_dflash("tokenize --model " + kQwen + " --decode 99999");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(test::has(r.output, "not in the tokenizer's vocabulary")) << r.output;
}

TEST(TokenizeCli, DataPrepareUsesTheModelsTokenizerAndTemplate) {
    test::TempDir dir("prep_model");
    std::ofstream(dir / "in.jsonl")
        << R"({"conversations": [{"from": "human", "value": "Q?"}, {"from": "gpt", "value": "An answer."}]})"
        << "\n";
    auto r = test::run_dflash("data prepare --model " + kLlama + " --input " +
                              (dir / "in.jsonl").string() + " --output " + (dir / "d").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(test::has(r.output, "chat template llama3.1")) << r.output;
    const auto tok = load_hf_tokenizer(kLlama, {});
    const ShardedDataset ds = ShardedDataset::open(dir / "d");
    EXPECT_EQ(ds.tokenizer_name(), tok->name());
    const auto s = ds.sample(0);
    std::vector<int32_t> reply;
    for (size_t i = 0; i < s.tokens.size(); ++i)
        if (s.loss_mask[i]) reply.push_back(s.tokens[i]);
    EXPECT_EQ(tok->decode(reply), "An answer.<|eot_id|>");

    r = test::run_dflash("data prepare --model " + kLlama + " --tokenizer byte --input " +
                         (dir / "in.jsonl").string() + " --output " + (dir / "e").string());
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(test::has(r.output, "excludes")) << r.output;

    // A chat template the byte tokenizer cannot apply was silently ignored: an error now.
    r = test::run_dflash("data prepare --tokenizer byte --chat.template qwen3 --input " +
                         (dir / "in.jsonl").string() + " --output " + (dir / "f").string());
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(test::has(r.output, "chat.template = qwen3 cannot apply")) << r.output;
    EXPECT_FALSE(std::filesystem::exists(dir / "f")) << r.output;
}

TEST(TokenizeCli, GenerateChatWithAnHfTarget) {
    test::TempDir dir("gen_hf");
    const auto tok = load_hf_tokenizer(kQwen, {});
    auto c = test::tiny_target_config(true, 3);
    c.vocab_size = (tok->vocab_size() + 64) / 64 * 64;  // the tokenizer's ids, padded
    c.bos_token_id = -1;
    c.eos_token_id = tok->specials().eos;
    TargetModel::random(test::host_backend(), c, 5, 0.5f).save(dir / "t");
    save_tokenizer_spec(dir / "t", *tok);
    const std::string base = "generate --target " + (dir / "t").string() +
                             " --prompt 'Hi there' --chat --chat.enable_thinking false"
                             " --infer.max_new_tokens 5 --runtime.threads 1";
    auto r = test::run_dflash(base + " --print-ids");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<int32_t> ids;
    std::istringstream in(r.output.substr(0, r.output.find('\n')));
    for (int32_t x; in >> x;) ids.push_back(x);
    EXPECT_GE(ids.size(), 1u) << r.output;
    EXPECT_LE(ids.size(), 5u) << r.output;
    // As text, the same tokens decoded (stop tokens are not printed).
    r = test::run_dflash(base);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::erase(ids, tok->specials().eos);
    EXPECT_EQ(r.output.substr(0, r.output.rfind("tokens ")), utf8_lossy(tok->decode(ids)) + "\n");
}

}  // namespace
}  // namespace dflash

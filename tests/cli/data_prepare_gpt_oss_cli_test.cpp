// `dflash data prepare --model <gpt-oss dir>` (issue 24): a gpt-oss directory as published (the
// MXFP4 target fixture tests/fixtures/targets/gpt_oss_mxfp4 with the o200k tokenizer, template
// and tokenizer_config of tests/fixtures/tokenizer/o200k) prepares chat data with the harmony
// template: the developer turn, the reply's reasoning as the analysis channel, the chat.*
// settings in the system turn, the loss on what the assistant says through <|return|>.
#include <filesystem>
#include <fstream>

#include "data/dataset.h"
#include "support/test_util.h"
#include "tokenizer/hf_tokenizer.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
const fs::path kTarget = DFLASH_SOURCE_DIR "/tests/fixtures/targets/gpt_oss_mxfp4";
const fs::path kTokenizer = DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/o200k";

// The text the loss is on: the masked tokens, decoded.
std::string trained_text(const Tokenizer& tok, const Encoded& s) {
    std::vector<int32_t> ids;
    for (size_t i = 0; i < s.tokens.size(); ++i)
        if (s.loss_mask[i]) ids.push_back(s.tokens[i]);
    return tok.decode(ids);
}

TEST(DataPrepareGptOss, HarmonyTemplateFromTheModelDirectory) {
    test::TempDir dir("prep_gpt_oss");
    const fs::path model = dir / "gpt-oss";
    fs::create_directories(model);
    for (const char* f : {"config.json", "model.safetensors"})
        fs::copy_file(kTarget / f, model / f);
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "chat_template.jinja"})
        fs::copy_file(kTokenizer / f, model / f);
    std::ofstream(dir / "in.jsonl")
        << R"({"messages": [{"role": "developer", "content": "Be brief."}, )"
        << R"({"role": "user", "content": "2+2?"}, )"
        << R"({"role": "assistant", "thinking": "Add them.", "content": "4"}]})"
        << "\n"
        << R"({"conversations": [{"from": "human", "value": "Hi"}, )"
        << R"({"from": "gpt", "value": "Hello!"}]})"
        << "\n";
    const auto r =
        test::run_dflash("data prepare --model " + model.string() + " --input " +
                         (dir / "in.jsonl").string() + " --output " + (dir / "d").string() +
                         " --chat.current_date 2026-01-02 --chat.reasoning_effort low");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(test::has(r.output, "2 samples")) << r.output;
    EXPECT_TRUE(test::has(r.output, "chat template harmony")) << r.output;

    const auto tok = load_hf_tokenizer(kTokenizer, {});
    const ShardedDataset ds = ShardedDataset::open(dir / "d");
    EXPECT_EQ(ds.tokenizer_name(), tok->name());
    ASSERT_EQ(ds.num_samples(), 2);
    const auto s = ds.sample(0);
    EXPECT_EQ(trained_text(*tok, s),
              "<|channel|>analysis<|message|>Add them.<|end|><|start|>assistant<|channel|>final"
              "<|message|>4<|return|>");
    EXPECT_EQ(tok->decode(s.tokens),
              "<|start|>system<|message|>You are ChatGPT, a large language model trained by "
              "OpenAI.\nKnowledge cutoff: 2024-06\nCurrent date: 2026-01-02\n\nReasoning: low\n\n"
              "# Valid channels: analysis, commentary, final. Channel must be included for every "
              "message.<|end|><|start|>developer<|message|># Instructions\n\nBe brief.\n\n<|end|>"
              "<|start|>user<|message|>2+2?<|end|><|start|>assistant<|channel|>analysis"
              "<|message|>Add them.<|end|><|start|>assistant<|channel|>final<|message|>4"
              "<|return|>");
    EXPECT_EQ(trained_text(*tok, ds.sample(1)), "<|channel|>final<|message|>Hello!<|return|>");
}

}  // namespace
}  // namespace dflash

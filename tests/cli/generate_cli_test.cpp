// `dflash generate` and `dflash bench` through the binary on a tiny random target (+ drafter)
// saved with the byte tokenizer: the streamed text is exactly the decoded greedy output of the
// same model in-process, plain and speculative alike; the summary line is printed; bad arguments
// are readable errors; bench prints its table, writes JSON (with --json-steps, every step) and
// reports lossless output.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "infer/spec_decode.h"
#include "infer/stop_tokens.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "tokenizer/model_tokenizer.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::has;

// A tiny target whose vocabulary is the byte tokenizer's, and a drafter for it, saved to disk.
struct SavedPair {
    test::TempDir dir{"gen_cli"};
    fs::path target_dir, drafter_dir;
    SavedPair() {
        auto tok = make_byte_tokenizer();
        auto tc = test::tiny_target_config(true, 3);
        tc.vocab_size = tok->vocab_size();
        tc.bos_token_id = tok->specials().bos;
        tc.eos_token_id = tok->specials().eos;
        target_dir = dir / "target";
        drafter_dir = dir / "drafter";
        TargetModel::random(test::host_backend(), tc, 21, 0.5f).save(target_dir);
        save_tokenizer_spec(target_dir, *tok);
        auto dc = make_drafter_config(tc, 1, 4, tok->specials().mask, {0, 1});
        DrafterModel::random(test::host_backend(), dc, 22, 0.5f).save(drafter_dir);
    }
};

// What `dflash generate` must print on stdout: the greedy continuation of `prompt` by the saved
// target, decoded, stop tokens left out, then a newline.
std::string expected_text(const SavedPair& p, const std::vector<int32_t>& prompt, int64_t n) {
    const TargetModel t = TargetModel::load(test::host_backend(), p.target_dir);
    auto tok = load_tokenizer_for_model(p.target_dir);
    auto be = make_cpu_backend(1);
    GenerateOptions o;
    o.max_new_tokens = n;
    o.stop_tokens = default_stop_tokens(t.config(), tok.get());
    const auto res = SpeculativeEngine(t, nullptr, *be).generate(prompt, o);
    StreamDecoder dec(*tok);
    std::string text;
    for (int32_t id : res.tokens)
        if (std::find(o.stop_tokens.begin(), o.stop_tokens.end(), id) == o.stop_tokens.end())
            text += dec.push(id);
    return text + dec.flush() + "\n";
}

TEST(GenerateCli, StreamsTheGreedyOutputPlainAndSpeculative) {
    const SavedPair p;
    const std::string want = expected_text(p, {257, 72, 105}, 12);
    const std::string base =
        "generate --target " + p.target_dir.string() +
        " --prompt-ids 257,72,105 --infer.max_new_tokens 12 --runtime.threads 1";
    for (const std::string& extra : {std::string(), " --drafter " + p.drafter_dir.string()}) {
        const auto r = test::run_dflash(base + extra);
        ASSERT_EQ(r.exit_code, 0) << r.output;
        // stdout (the text, flushed as it streams) comes before the summary on stderr.
        EXPECT_TRUE(r.output.starts_with(want)) << extra << "\n" << r.output;
        const std::string summary = r.output.substr(want.size());
        EXPECT_TRUE(has(summary, "(prompt 3), tau ")) << summary;
        EXPECT_TRUE(has(summary, "tokens/s")) << summary;
        EXPECT_TRUE(has(summary, "stop ")) << summary;
        if (extra.empty()) {
            EXPECT_TRUE(has(summary, "tau 1.00")) << summary;
        }
    }
}

TEST(GenerateCli, TextAndChatPromptsRun) {
    const SavedPair p;
    const std::string base = "generate --target " + p.target_dir.string() + " --drafter " +
                             p.drafter_dir.string() + " --infer.max_new_tokens 5";
    auto r = test::run_dflash(base + " --prompt 'Hello there'");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "(prompt 12)")) << r.output;  // bos + 11 bytes
    r = test::run_dflash(base + " --prompt 'Hi' --chat");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "(prompt 6)")) << r.output;  // bos user H i end_turn assistant
}

TEST(GenerateCli, BadArgumentsAreReadableErrors) {
    const SavedPair p;
    const std::string base = "generate --target " + p.target_dir.string();
    auto r = test::run_dflash(base);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(has(r.output, "dflash: error: give exactly one of --prompt")) << r.output;
    r = test::run_dflash(base + " --prompt-ids 1,x");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(has(r.output, "token id list entry 1 is 'x'")) << r.output;
    r = test::run_dflash(base + " --prompt-ids 1,999");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(has(r.output, "prompt token 1 has id 999")) << r.output;
    r = test::run_dflash(base + " --prompt-ids 1 --chat");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(has(r.output, "--chat")) << r.output;
}

TEST(BenchCli, PrintsTheTableWritesJsonAndIsLossless) {
    const SavedPair p;
    const fs::path prompts = p.dir / "prompts.jsonl";
    std::ofstream(prompts) << "{\"prompt\": \"The cat\"}\n"
                              "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]}\n"
                              "{\"prompt_ids\": [257, 1, 2, 3], \"label\": \"ids\"}\n";
    const fs::path json = p.dir / "bench.json";
    const auto r = test::run_dflash("bench --target " + p.target_dir.string() + " --drafter " +
                                    p.drafter_dir.string() + " --prompts " + prompts.string() +
                                    " --json " + json.string() +
                                    " --limit 2 --infer.max_new_tokens 20 --runtime.threads 1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* s : {"The cat", "Hi", "2 prompts", "lossless: yes, 2 of 2", "predicted"})
        EXPECT_TRUE(has(r.output, s)) << s << "\n" << r.output;
    EXPECT_FALSE(has(r.output, "  ids  ")) << r.output;  // --limit 2
    std::ifstream in(json);
    const auto j = nlohmann::json::parse(in);
    EXPECT_TRUE(j["lossless"].get<bool>());
    EXPECT_EQ(j["requests"].size(), 2u);
    EXPECT_EQ(j["block_size"].get<int64_t>(), 4);
    EXPECT_FALSE(j["requests"][0].contains("steps"));  // only with --json-steps

    // --json-steps: every speculative step of every prompt; it needs --json.
    const auto s = test::run_dflash("bench --target " + p.target_dir.string() + " --drafter " +
                                    p.drafter_dir.string() + " --prompts " + prompts.string() +
                                    " --json " + json.string() +
                                    " --json-steps --limit 1 --infer.max_new_tokens 12"
                                    " --runtime.threads 1");
    ASSERT_EQ(s.exit_code, 0) << s.output;
    std::ifstream in2(json);
    const auto js = nlohmann::json::parse(in2)["requests"][0];
    ASSERT_EQ(js["steps"].size(), js["speculative"]["steps"].get<size_t>());
    ASSERT_FALSE(js["steps"].empty());
    EXPECT_EQ(js["steps"][0]["drafted"].size(), 3u);  // block 4: B - 1 drafts
    const auto no_json = test::run_dflash("bench --target " + p.target_dir.string() +
                                          " --drafter " + p.drafter_dir.string() + " --prompts " +
                                          prompts.string() + " --json-steps");
    EXPECT_EQ(no_json.exit_code, 1);
    EXPECT_TRUE(has(no_json.output, "--json-steps needs --json")) << no_json.output;
}

TEST(BenchCli, MissingPromptsFileIsAnError) {
    const SavedPair p;
    const auto r =
        test::run_dflash("bench --target " + p.target_dir.string() + " --drafter " +
                         p.drafter_dir.string() + " --prompts " + (p.dir / "none.jsonl").string());
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(has(r.output, "dflash: error: cannot open prompts file")) << r.output;
    // `--prompts /dev/zero` once read until memory ran out: refused at once (`timeout` turns a
    // hang into exit code 124).
    const auto z = test::run_dflash("bench --target " + p.target_dir.string() + " --drafter " +
                                        p.drafter_dir.string() + " --prompts /dev/zero",
                                    "timeout 120");
    EXPECT_EQ(z.exit_code, 1) << z.output;
    EXPECT_TRUE(has(z.output, "prompts file '/dev/zero' is a character device")) << z.output;
}

}  // namespace
}  // namespace dflash

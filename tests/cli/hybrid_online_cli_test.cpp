// The commands around online drafter training on hybrid linear-attention targets (issue 25),
// through the binary:
// - a transformers fixture directory (tests/fixtures/targets/qwen3_5, with the Qwen3.5 tokenizer
//   of tests/fixtures/tokenizer/qwen35 copied in, as a published directory holds one): `data
//   prepare --model` tokenizes chats with the Qwen3.5 template; `generate` decodes transformers'
//   greedy continuation, plainly and with a drafter; `bench` reports lossless output;
// - the whole pipeline on a target of the fixture's configuration with the byte tokenizer's
//   vocabulary (Qwen3.5's and Qwen3-Next's): `data prepare --model`, `train` online from a fresh
//   drafter (with a held-out evaluation that decodes prompts), then `bench` with the trained
//   drafter: lossless.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/dataset.h"
#include "model/drafter.h"
#include "model/target.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "tokenizer/model_tokenizer.h"
#include "train/checkpoint.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::has;

const fs::path kTargets = DFLASH_SOURCE_DIR "/tests/fixtures/targets";
const fs::path kQwen35Tokenizer = DFLASH_SOURCE_DIR "/tests/fixtures/tokenizer/qwen35";

std::string ids_text(const std::vector<int32_t>& ids) {
    std::string s;
    for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
    return s;
}

TEST(HybridCli, FixtureDirectoryPreparesGeneratesAndBenches) {
    test::TempDir dir("hybrid_cli_fixture");
    const fs::path model = dir / "qwen3_5";
    fs::create_directories(model);
    for (const char* f : {"config.json", "model.safetensors"})
        fs::copy_file(kTargets / "qwen3_5" / f, model / f);
    fs::copy_file(kQwen35Tokenizer / "tokenizer.json", model / "tokenizer.json");

    // data prepare --model: the tokenizer and the template of the model's type.
    std::ofstream(dir / "in.jsonl") << R"({"messages": [{"role": "user", "content": "2+2?"}, )"
                                    << R"({"role": "assistant", "content": "4"}]})"
                                    << "\n";
    const auto prep =
        test::run_dflash("data prepare --model " + model.string() + " --input " +
                         (dir / "in.jsonl").string() + " --output " + (dir / "d").string());
    ASSERT_EQ(prep.exit_code, 0) << prep.output;
    EXPECT_TRUE(has(prep.output, "chat template qwen3_5")) << prep.output;
    const ShardedDataset ds = ShardedDataset::open(dir / "d");
    ASSERT_EQ(ds.num_samples(), 1);
    EXPECT_EQ(ds.tokenizer_name(), load_tokenizer_for_model(model)->name());

    // generate: transformers' greedy continuation of the fixture's first prompt, plain and with a
    // (random) drafter; the fixture's vocabulary has no <|MASK|>, so the drafter's mask is its
    // last id.
    std::ifstream ef(kTargets / "qwen3_5" / "expected.json");
    const auto ex = nlohmann::json::parse(ef);
    const auto prompt = ex["prompts"][0].get<std::vector<int32_t>>();
    const auto greedy = ex["greedy"][0].get<std::vector<int32_t>>();
    const TargetConfig tc = TargetConfig::load(model);
    const fs::path drafter = dir / "drafter";
    DrafterModel::random(test::host_backend(),
                         make_drafter_config(tc, 1, 4, tc.vocab_size - 1, {0, 2}), 3, 0.5f)
        .save(drafter);
    for (const std::string& extra : {std::string(), " --drafter " + drafter.string()}) {
        const auto g = test::run_dflash("generate --target " + model.string() + " --prompt-ids " +
                                        ids_text(prompt) + " --print-ids --infer.max_new_tokens " +
                                        std::to_string(greedy.size()) + extra);
        ASSERT_EQ(g.exit_code, 0) << g.output;
        std::vector<int32_t> got;
        std::istringstream in(g.output);
        for (std::string w; in >> w && got.size() < greedy.size();) got.push_back(std::stoi(w));
        EXPECT_EQ(got, greedy) << extra << "\n" << g.output;
    }

    // bench: the fixture's three prompts (one crosses a 64-token chunk), lossless.
    std::ofstream pf(dir / "prompts.jsonl");
    for (const auto& p : ex["prompts"]) pf << R"({"prompt_ids": )" << p.dump() << "}\n";
    pf.close();
    const auto b = test::run_dflash(
        "bench --target " + model.string() + " --drafter " + drafter.string() + " --prompts " +
        (dir / "prompts.jsonl").string() + " --infer.max_new_tokens 24 --runtime.threads 1");
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_TRUE(has(b.output, "lossless: yes, 3 of 3")) << b.output;
}

// Byte-vocabulary targets of the hybrid fixtures' configurations: prepare, train online, bench.
class HybridPipeline : public ::testing::TestWithParam<std::string> {};

TEST_P(HybridPipeline, PrepareTrainOnlineThenBenchLosslessly) {
    test::TempDir dir("hybrid_cli_pipeline");
    const auto tok = make_byte_tokenizer();
    TargetConfig c = TargetConfig::load(kTargets / GetParam());
    c.vocab_size = tok->vocab_size();
    c.bos_token_id = tok->specials().bos;
    c.eos_token_id = tok->specials().eos;
    const fs::path target = dir / "target";
    TargetModel::random(test::host_backend(), c, 5, 0.3f).save(target);
    save_tokenizer_spec(target, *tok);

    {
        std::ofstream in(dir / "chats.jsonl");
        for (int i = 0; i < 12; ++i)
            in << R"({"messages": [{"role": "user", "content": "count )" << i << R"("}, )"
               << R"({"role": "assistant", "content": "abcdeabcdeabcde )" << i << R"("}]})"
               << "\n";
    }
    const auto prep =
        test::run_dflash("data prepare --model " + target.string() + " --input " +
                         (dir / "chats.jsonl").string() + " --output " + (dir / "data").string());
    ASSERT_EQ(prep.exit_code, 0) << prep.output;
    EXPECT_TRUE(has(prep.output, "12 samples")) << prep.output;

    std::ofstream(dir / "prompts.jsonl") << "{\"prompt\": \"abcde\"}\n"
                                            "{\"messages\": [{\"role\": \"user\", \"content\": "
                                            "\"count 3\"}]}\n";
    // With a held-out evaluation that also decodes the prompts speculatively (real tau).
    const auto tr = test::run_dflash(
        "train --target " + target.string() + " --data " + (dir / "data").string() +
        " --eval-data " + (dir / "data").string() + " --eval-prompts " +
        (dir / "prompts.jsonl").string() + " --output " + (dir / "run").string() +
        " --runtime.threads 1 --train.max_steps 8 --train.max_length 64 --train.num_anchors 4"
        " --drafter.block_size 4 --drafter.num_layers 1 --train.log_every 1");
    ASSERT_EQ(tr.exit_code, 0) << tr.output;
    EXPECT_TRUE(has(tr.output, "held-out: loss")) << tr.output;
    EXPECT_TRUE(has(tr.output, "decoding: tau")) << tr.output;
    // The released-drafter rule for a 4-layer target: one feature, layer 2, a Gated DeltaNet
    // layer in both (Qwen3.5's 3 linear + 1 full; Qwen3-Next's fixture alternates, its layer 2
    // with a dense MLP).
    EXPECT_TRUE(has(tr.output, "target layers [2]")) << tr.output;
    const fs::path drafter = dir / "run" / train::checkpoint_name(8);
    ASSERT_TRUE(fs::exists(drafter / "config.json")) << tr.output;

    const auto b = test::run_dflash(
        "bench --target " + target.string() + " --drafter " + drafter.string() + " --prompts " +
        (dir / "prompts.jsonl").string() + " --infer.max_new_tokens 20 --runtime.threads 1");
    ASSERT_EQ(b.exit_code, 0) << b.output;
    EXPECT_TRUE(has(b.output, "lossless: yes, 2 of 2")) << b.output;
}

INSTANTIATE_TEST_SUITE_P(Families, HybridPipeline, ::testing::Values("qwen3_5", "qwen3_next"));

}  // namespace
}  // namespace dflash

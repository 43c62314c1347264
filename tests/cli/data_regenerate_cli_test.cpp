// `dflash data regenerate` through the real binary: a saved target answers a prompts file, the
// shards hold prompt + response with the loss on the response, and a non-empty output is refused.
#include <fstream>

#include "data/dataset.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "tokenizer/model_tokenizer.h"

namespace dflash {
namespace {

TEST(DataRegenerateCli, WritesTargetResponses) {
    test::TempDir dir("regen-cli");
    auto tok = make_byte_tokenizer();
    auto cfg = test::tiny_target_config(true, 2);
    cfg.vocab_size = tok->vocab_size();
    TargetModel::random(test::host_backend(), cfg, 3, 0.5f).save(dir / "target", DType::f32);
    save_tokenizer_spec(dir / "target", *tok);
    std::ofstream(dir / "prompts.jsonl")
        << "{\"prompt\": \"int main(\"}\n{\"prompt_ids\": [5, 6]}\n";
    const std::string args = "data regenerate --target " + (dir / "target").string() +
                             " --prompts " + (dir / "prompts.jsonl").string() +
                             " --infer.max_new_tokens 7 --output ";
    const auto r = test::run_dflash(args + (dir / "out").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const ShardedDataset ds = ShardedDataset::open(dir / "out");
    ASSERT_EQ(ds.num_samples(), 2);
    const Encoded s = ds.sample(1);
    ASSERT_EQ(s.tokens.size(), 2u + 7u);
    EXPECT_EQ(s.tokens[0], 5);
    EXPECT_EQ(s.loss_mask[1], 0);
    EXPECT_EQ(s.loss_mask[2], 1);
    const auto again = test::run_dflash(args + (dir / "out").string());
    EXPECT_NE(again.exit_code, 0);
    EXPECT_NE(again.output.find("not empty"), std::string::npos) << again.output;
}

}  // namespace
}  // namespace dflash

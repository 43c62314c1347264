// Regenerated samples are the prompt plus the target's own greedy continuation, with the loss mask
// on the response only, and do not depend on how many workers produced them.
#include "infer/regenerate.h"
#include "data/dataset.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

TEST(Regenerate, SamplesAreTargetContinuationsIndependentOfWorkers) {
    TargetModel t =
        TargetModel::random(test::host_backend(), test::tiny_target_config(true, 2), 5, 0.5f);
    std::vector<std::vector<int32_t>> prompts;
    Rng rng(1);
    for (int i = 0; i < 7; ++i) {
        std::vector<int32_t> p(1 + i % 4);
        for (auto& x : p) x = static_cast<int32_t>(rng.below(t.config().vocab_size));
        prompts.push_back(p);
    }
    RegenerateOptions o;
    o.generate.max_new_tokens = 9;
    o.workers = 1;
    const auto one = regenerate_responses(t, prompts, o, Logger());
    o.workers = 3;
    RegenerateStats st;
    const auto three = regenerate_responses(t, prompts, o, Logger(), &st);
    ASSERT_EQ(one.size(), prompts.size());
    auto be = make_cpu_backend(1);
    SpeculativeEngine plain(t, nullptr, *be);
    for (size_t i = 0; i < prompts.size(); ++i) {
        EXPECT_EQ(one[i].tokens, three[i].tokens);
        const auto r = plain.generate(prompts[i], o.generate);
        std::vector<int32_t> want = prompts[i];
        want.insert(want.end(), r.tokens.begin(), r.tokens.end());
        EXPECT_EQ(one[i].tokens, want);
        for (size_t k = 0; k < want.size(); ++k)
            EXPECT_EQ(one[i].loss_mask[k], k < prompts[i].size() ? 0 : 1);
    }
    EXPECT_EQ(st.samples, 7);
    EXPECT_EQ(st.response_tokens, 7 * 9);

    test::TempDir dir("regen");
    auto tok = make_byte_tokenizer();
    // The byte tokenizer's vocabulary is larger than the tiny target's: every id fits.
    write_samples_shard(dir.path(), one, *tok);
    const ShardedDataset ds = ShardedDataset::open(dir.path());
    ASSERT_EQ(ds.num_samples(), 7);
    EXPECT_EQ(ds.sample(3).tokens, one[3].tokens);
    EXPECT_EQ(ds.sample(3).loss_mask, one[3].loss_mask);
}

}  // namespace
}  // namespace dflash

// Online drafter training (the target runs inside every step) with the mixture-of-experts and
// hybrid linear-attention targets (issues 24 and 25): for each family, a target of the exact
// configuration of its transformers fixture (tests/fixtures/targets: qwen3_moe with a dense layer,
// gpt-oss with sinks and sliding windows, Qwen3-Next, Qwen3.5 dense / MoE / multimodal wrapper),
// with random weights and the byte tokenizer's vocabulary (the fixtures' 128-id vocabularies hold
// no tokenizer the data could be written in), saved in the family's Hub layout and trained from a
// fresh drafter: the default target_layer_ids follow the released-drafter rule, the loss falls
// over a few dozen steps, and a resumed run ends bit for bit where the straight run does. A
// teacher loss (kl: the full forward, the final (1 + w) norm and the LM head) with separate
// documents trains as well.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

const fs::path kTargets = DFLASH_SOURCE_DIR "/tests/fixtures/targets";
const std::vector<std::string> kFamilies = {"qwen3_moe_fused", "gpt_oss",     "qwen3_next",
                                            "qwen3_5",         "qwen3_5_moe", "qwen3_5_wrapper"};

// The fixture's configuration with the byte tokenizer's vocabulary, random weights (std 0.2, so
// that the features differ between layers and tokens), saved with the tokenizer's description.
void write_family_target(const fs::path& dir, const std::string& family) {
    const auto tok = make_byte_tokenizer();
    TargetConfig c = TargetConfig::load(kTargets / family);
    c.vocab_size = tok->vocab_size();
    c.bos_token_id = tok->specials().bos;
    c.eos_token_id = tok->specials().eos;
    TargetModel::random(test::host_backend(), c, 11, 0.2f).save(dir, DType::f32);
    save_tokenizer_spec(dir, *tok);
}

class OnlineFamilies : public test::SharedInputsTest<OnlineFamilies>,
                       public ::testing::WithParamInterface<std::string> {
  public:
    static constexpr const char* kTag = "dflash-online-families";
    static void write_inputs(const fs::path& dir) {
        test::write_pattern_dataset(dir / "data", 24, 5);
        for (const auto& f : kFamilies) write_family_target(dir / f, f);
    }

  protected:
    static train::DrafterTrainJob job(const std::string& out) {
        train::DrafterTrainJob j = test::drafter_job(dir_->path(), GetParam() + "-" + out);
        j.target_dir = *dir_ / GetParam();
        return j;
    }
    // Steps of `kv` (on top of test::drafter_settings) with every step's loss.
    static test::RecordedRun train(const std::string& out,
                                   std::vector<std::pair<std::string, std::string>> kv,
                                   const fs::path& resume = {}) {
        train::DrafterTrainJob j = job(out);
        j.resume = resume;
        test::RecordedRun r;
        j.hooks.on_record = [&r](const train::StepRecord& rec) {
            if (!rec.eval) r.losses.push_back(rec.loss);
        };
        // A resume is given nothing but --resume: it continues with the checkpoint's settings.
        const config::Settings settings =
            resume.empty() ? test::drafter_settings(kv) : config::Settings(test::registry());
        r.summary = train_drafter_from_settings(j, settings, Logger());
        return r;
    }
};

double mean(const std::vector<double>& v, size_t from, size_t to) {
    return std::accumulate(v.begin() + from, v.begin() + to, 0.0) / static_cast<double>(to - from);
}

TEST_P(OnlineFamilies, DefaultLayersLossFallsAndResumeIsExact) {
    const TargetConfig tc = TargetConfig::load(*dir_ / GetParam());
    const auto r = train("fall", {{"train.max_steps", "30"}, {"train.checkpoint_every", "15"}});
    ASSERT_EQ(r.losses.size(), 30u);
    for (double l : r.losses) ASSERT_TRUE(std::isfinite(l)) << GetParam();
    // The loss falls: the last five steps' mean below half the first five's (about 6 -> 2).
    const double first = mean(r.losses, 0, 5), last = mean(r.losses, 25, 30);
    EXPECT_LT(last, 0.5 * first) << GetParam() << ": " << first << " -> " << last;

    // The drafter reads the released-drafter rule's layers of this target (3 or 4 layers: one
    // feature, docs/formats.md), below the last layer.
    const DrafterConfig dc = DrafterConfig::load(r.summary.model_dir);
    const int64_t n = std::clamp<int64_t>(tc.num_hidden_layers - 3, 1, 5);
    EXPECT_EQ(dc.target_layer_ids, default_target_layer_ids(tc.num_hidden_layers, n));
    EXPECT_EQ(dc.num_target_layers, tc.num_hidden_layers);

    // Resumed from the step-15 checkpoint: the same masters and moments at step 30.
    const auto resumed = train("resumed", {}, r.summary.run_dir / train::checkpoint_name(15));
    EXPECT_EQ(resumed.summary.first_step, 16);
    ASSERT_EQ(resumed.losses.size(), 15u);
    for (size_t i = 0; i < 15; ++i) EXPECT_EQ(resumed.losses[i], r.losses[15 + i]) << i;
    test::expect_same_state(r.summary.model_dir, resumed.summary.model_dir);
}

// Explicit ids naming every layer but the last, linear and full alike, a teacher loss, which runs
// the whole target, its final norm and its LM head, and separate documents (a target forward per
// sample, its linear-attention states from zero each time).
TEST_P(OnlineFamilies, EveryLayerAndATeacherLossTrain) {
    const TargetConfig tc = TargetConfig::load(*dir_ / GetParam());
    std::string ids;
    for (int64_t l = tc.num_hidden_layers - 2; l >= 0; --l)
        ids += std::to_string(l) + (l > 0 ? "," : "");
    const auto r = train("kl", {{"train.max_steps", "12"},
                                {"train.loss", "0.5*ce+0.5*kl"},
                                {"train.documents", "separate"},
                                {"drafter.target_layer_ids", ids}});
    ASSERT_EQ(r.losses.size(), 12u);
    for (double l : r.losses) ASSERT_TRUE(std::isfinite(l)) << GetParam();
    EXPECT_LT(mean(r.losses, 8, 12), 0.8 * mean(r.losses, 0, 4)) << GetParam();
    const DrafterConfig dc = DrafterConfig::load(r.summary.model_dir);
    EXPECT_EQ(static_cast<int64_t>(dc.target_layer_ids.size()), tc.num_hidden_layers - 1);
}

INSTANTIATE_TEST_SUITE_P(Families, OnlineFamilies, ::testing::ValuesIn(kFamilies));

}  // namespace
}  // namespace dflash

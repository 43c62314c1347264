// Target pretraining (src/train/pretraining.h): the loss falls on a learnable dataset, the
// checkpoint is an HF Qwen3 directory that loads back and passes inspect, resume is bitwise, and
// gradients summed in buckets during the backward give the bits of one sum.
#include <gtest/gtest.h>

#include <cstring>

#include "core/checkpoint_io.h"
#include "model/inspect.h"
#include "model/target.h"
#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train/pretraining.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

config::Settings pretrain_settings(std::vector<std::pair<std::string, std::string>> more = {}) {
    std::vector<std::pair<std::string, std::string>> kv = {
        {"pretrain.hidden_size", "32"}, {"pretrain.num_layers", "2"},
        {"pretrain.num_heads", "4"},    {"pretrain.num_kv_heads", "2"},
        {"pretrain.head_dim", "8"},     {"pretrain.intermediate_size", "48"},
        {"pretrain.max_length", "64"},  {"pretrain.lr", "1e-2"},
        {"pretrain.max_steps", "6"}};
    kv.insert(kv.end(), more.begin(), more.end());
    return test::drafter_settings(kv);
}

class Pretraining : public test::SharedInputsTest<Pretraining> {
  public:
    static constexpr const char* kTag = "dflash-pretrain";
    static void write_inputs(const fs::path& dir) {
        test::write_pattern_dataset(dir / "data", 24, 5);
    }

  protected:
    static train::PretrainJob job(const std::string& out) {
        train::PretrainJob j;
        j.data_dir = *dir_ / "data";
        j.output_dir = *dir_ / out;
        j.hooks.handle_signals = false;
        j.hooks.progress = false;
        return j;
    }
};

TEST_F(Pretraining, LossFallsAndCheckpointIsAQwen3Directory) {
    const auto s = pretrain_settings({{"pretrain.max_steps", "60"}, {"train.batch_size", "2"}});
    const train::TrainSummary sum = pretrain_from_settings(job("learn"), s, Logger());
    EXPECT_EQ(sum.steps, 60);
    // ln(264) = 5.6 at the start; prompts are random (4 letters) but responses are a pattern.
    EXPECT_LT(sum.final_loss, 0.4 * sum.first_loss)
        << "first " << sum.first_loss << " final " << sum.final_loss;
    ASSERT_EQ(sum.acc.size(), 1u);
    EXPECT_GT(sum.acc[0], 0.6);
    EXPECT_EQ(sum.tau_implied, 0.0);

    const fs::path ck = sum.model_dir;
    const auto cfg = read_json_file(ck / "config.json");
    EXPECT_EQ(cfg["model_type"], "qwen3");
    EXPECT_EQ(cfg["architectures"][0], "Qwen3ForCausalLM");
    EXPECT_EQ(cfg["tie_word_embeddings"], false);
    EXPECT_EQ(cfg["vocab_size"].get<int64_t>() % 8, 0);
    EXPECT_EQ(cfg["vocab_size"], make_byte_tokenizer()->vocab_size());
    const TargetModel back = TargetModel::load(test::host_backend(), ck);
    EXPECT_EQ(back.config().num_hidden_layers, 2);
    const InspectReport rep = inspect_directory(ck);
    EXPECT_TRUE(rep.ok()) << rep.text;
    EXPECT_EQ(rep.kind, "target");
    EXPECT_EQ(load_tokenizer_for_model(ck)->name(), "byte");
    EXPECT_EQ(train::read_training_state(ck).kind, "target");
}

TEST_F(Pretraining, ResumeIsBitwiseIdentical) {
    const auto s = pretrain_settings({{"train.checkpoint_every", "3"}, {"runtime.devices", "2"}});
    const auto straight = pretrain_from_settings(job("straight"), s, Logger());
    auto j = job("resumed");
    j.resume = *dir_ / "straight";  // a run directory: its latest checkpoint (step 6) ...
    EXPECT_THROW(pretrain_from_settings(j, s, Logger()), Error);  // ... is already the end
    j.resume = *dir_ / "straight" / train::checkpoint_name(3);
    const auto resumed = pretrain_from_settings(j, s, Logger());
    EXPECT_EQ(resumed.first_step, 4);
    const auto a = test::read_state_tensors(straight.model_dir);
    const auto b = test::read_state_tensors(resumed.model_dir);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, va] : a) {
        ASSERT_TRUE(b.count(name)) << name;
        EXPECT_EQ(std::memcmp(va.data(), b.at(name).data(), va.size() * sizeof(float)), 0) << name;
    }
}

TEST_F(Pretraining, DrafterTrainsOnThePretrainedTarget) {
    // The pretrain -> train hand-off the demo makes: the target's tokenizer file is read.
    const auto target = pretrain_from_settings(job("for-drafter"), pretrain_settings(), Logger());
    train::DrafterTrainJob dj;
    dj.target_dir = target.model_dir;
    dj.data_dir = *dir_ / "data";
    dj.output_dir = *dir_ / "drafter";
    dj.hooks.handle_signals = false;
    dj.hooks.progress = false;
    const auto d = train_drafter_from_settings(dj, test::drafter_settings(), Logger());
    EXPECT_EQ(d.steps, 6);
    EXPECT_TRUE(inspect_directory(d.model_dir).ok());
}

// A target's backward reports its final gradients from the top down too (lm_head, the norm, the
// layers, the embedding last; Note [Final gradients]): two workers summing in small buckets
// during the backward (the CPU backend's device collectives) train the host path's bits.
TEST_F(Pretraining, BucketedSumsDuringTheBackwardEqualTheHostSum) {
    const auto run = [&](const std::string& out, const char* how) {
        return pretrain_from_settings(job(out),
                                      pretrain_settings({{"runtime.devices", "2"},
                                                         {"train.grad_clip", "0"},
                                                         {"runtime.gradient_exchange", how},
                                                         {"runtime.gradient_bucket_mb", "0.002"}}),
                                      Logger());
    };
    const train::TrainSummary host = run("bucket-host", "host");
    const train::TrainSummary buckets = run("bucket-device", "device");
    EXPECT_EQ(buckets.final_loss, host.final_loss);
    test::expect_same_state(buckets.model_dir, host.model_dir);
}

}  // namespace
}  // namespace dflash

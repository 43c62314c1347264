// A non-finite loss (src/train/trainer.cpp): the run stops with an error that names the step, and
// the last checkpoint stays intact and resumable. Non-finite weights are injected through
// TrainHooks::on_step_weights; a doctored --init-drafter is refused when it loads.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>

#include "model/drafter.h"
#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

class Divergence : public test::SharedInputsTest<Divergence> {
  public:
    static constexpr const char* kTag = "dflash-divergence";
    static void write_inputs(const fs::path& dir) {
        test::write_pattern_dataset(dir / "data", 12, 12);
        test::write_tiny_target(dir / "target");
    }

  protected:
    static train::DrafterTrainJob job(const std::string& out) {
        return test::drafter_job(dir_->path(), out);
    }
    // Runs the job, expecting it to fail; returns the error message.
    static std::string failure(const train::DrafterTrainJob& j, const config::Settings& s) {
        try {
            train_drafter_from_settings(j, s, Logger());
        } catch (const Error& e) {
            return e.what();
        }
        ADD_FAILURE() << "the run should fail";
        return "";
    }
};

void fill_param(const Param& p, float v) {
    std::fill(p.value.f32(), p.value.f32() + p.value.numel(), v);
}

TEST_F(Divergence, NanLossNamesTheStepAndKeepsTheLastCheckpoint) {
    auto j = job("nan");
    // Two workers: every replica goes bad at step 4, as a diverging run's would.
    j.hooks.on_step_weights = [](int, int64_t step, ParamSet& ps) {
        if (step == 4) fill_param(ps.params().front(), std::numeric_limits<float>::quiet_NaN());
    };
    const auto s = test::drafter_settings(
        {{"train.max_steps", "6"}, {"train.checkpoint_every", "2"}, {"runtime.devices", "2"}});
    const std::string msg = failure(j, s);
    // fmt may print the NaN as "-nan".
    EXPECT_NE(msg.find("the loss is"), std::string::npos) << msg;
    EXPECT_NE(msg.find("nan at step 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("the last checkpoint is intact"), std::string::npos) << msg;

    const fs::path run = *dir_ / "nan";
    const fs::path ck2 = run / train::checkpoint_name(2);
    EXPECT_EQ(train::resolve_resume_dir(run), ck2);
    EXPECT_FALSE(fs::exists(run / train::checkpoint_name(4)));
    for (const auto& e : fs::directory_iterator(run))
        EXPECT_EQ(e.path().filename().string().rfind(".tmp", 0), std::string::npos) << e.path();
    for (const auto& [name, v] : test::read_state_tensors(ck2))
        for (float x : v) ASSERT_TRUE(std::isfinite(x)) << name;
    EXPECT_EQ(train::read_training_state(ck2).step, 2);
    // No record of the failed step reached metrics.jsonl.
    std::ifstream in(run / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) EXPECT_LT(nlohmann::json::parse(line)["step"], 4) << line;

    // The checkpoint resumes, and the run finishes.
    auto again = job("nan");
    again.resume = run;
    const train::TrainSummary sum = train_drafter_from_settings(again, s, Logger());
    EXPECT_EQ(sum.first_step, 3);
    EXPECT_EQ(sum.steps, 6);
    EXPECT_TRUE(std::isfinite(sum.final_loss));
}

TEST_F(Divergence, InfiniteWeightIsCaughtToo) {
    auto j = job("inf");
    j.hooks.on_step_weights = [](int, int64_t step, ParamSet& ps) {
        if (step == 2) fill_param(ps.params().back(), std::numeric_limits<float>::infinity());
    };
    const std::string msg = failure(j, test::drafter_settings({{"train.max_steps", "3"}}));
    EXPECT_NE(msg.find("at step 2"), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("the loss is") != std::string::npos ||
                msg.find("the gradient norm is") != std::string::npos)
        << msg;
}

TEST_F(Divergence, DoctoredInitDrafterIsRefusedNamingTheTensor) {
    // A drafter that some other run saved with a NaN in a weight (bf16 keeps NaN): loading it
    // stops before any training, naming the tensor.
    const TargetModel target = TargetModel::load(test::host_backend(), *dir_ / "target");
    const train::TrainingOptions o = training_options_from_settings(test::drafter_settings());
    DrafterModel d = train::make_initial_drafter(test::host_backend(), target,
                                                 *make_byte_tokenizer(), o.drafter, o.runtime.seed);
    const Param& norm = d.params().params().back();
    norm.value.f32()[0] = std::numeric_limits<float>::quiet_NaN();
    d.save(*dir_ / "doctored");
    auto j = job("doctored-run");
    j.init_drafter = *dir_ / "doctored";
    const std::string msg = failure(j, test::drafter_settings());
    EXPECT_NE(msg.find("tensor '" + norm.name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not finite"), std::string::npos) << msg;
    EXPECT_FALSE(fs::exists(*dir_ / "doctored-run"));
}

}  // namespace
}  // namespace dflash

// Drafter training with the objectives of train.loss and train.documents (drafter_training.h):
// KL distillation lowers the KL on the CPU and metrics.jsonl says which loss it is; so do TV and
// DSpark's 0.1*ce+0.9*l1 mix; a bad train.loss is an error naming the setting; separate documents
// train, and a run of both resumes bit for bit from a checkpoint; ce stays the default; ce does not
// depend on the target's layers past the deepest feature layer, a teacher loss does.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_util.h"
#include "train/checkpoint.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

class Objectives : public test::SharedInputsTest<Objectives> {
  public:
    static constexpr const char* kTag = "dflash-objectives";
    static void write_inputs(const std::filesystem::path& dir) {
        test::write_pattern_dataset(dir / "data", 24, 3);
        test::write_tiny_target(dir / "target");
        write_poisoned_target(dir / "target", dir / "poisoned_target");
    }

    // The target with weights that overflow to infinities and NaN when run (a loaded file may not
    // hold NaN) after the drafter's deepest feature layer: layers 3 and 4 of 5 (the default
    // features are [1, 2]) and the final norm.
    static void write_poisoned_target(const std::filesystem::path& from,
                                      const std::filesystem::path& to) {
        TargetModel m = TargetModel::load(test::host_backend(), from);
        for (const Param& p : m.params().params())
            if (p.name.starts_with("model.layers.3.") || p.name.starts_with("model.layers.4.") ||
                p.name == "model.norm.weight")
                fill_f32(p.value, 1e30f);
        m.save(to);
        save_tokenizer_spec(to, *make_byte_tokenizer());
    }

  protected:
    static train::TrainSummary train(const std::string& out,
                                     std::vector<std::pair<std::string, std::string>> kv,
                                     std::vector<double>* losses = nullptr) {
        train::DrafterTrainJob job = test::drafter_job(dir_->path(), out);
        job.hooks.on_record = [losses](const train::StepRecord& rec) {
            if (!rec.eval && losses) losses->push_back(rec.loss);
        };
        return train_drafter_from_settings(job, test::drafter_settings(kv), Logger());
    }
    static std::vector<nlohmann::json> metrics(const train::TrainSummary& s) {
        std::istringstream in(test::read_file(s.metrics_path));
        std::vector<nlohmann::json> out;
        for (std::string line; std::getline(in, line);)
            if (!line.empty()) out.push_back(nlohmann::json::parse(line));
        return out;
    }
};

TEST_F(Objectives, KlTrainingLowersTheKlAndMetricsNameIt) {
    std::vector<double> losses;
    const train::TrainSummary s = train("kl",
                                        {{"train.loss", "kl"},
                                         {"train.max_steps", "60"},
                                         {"train.lr", "1e-2"},
                                         {"train.batch_size", "2"},
                                         {"train.warmup_ratio", "0.05"}},
                                        &losses);
    ASSERT_EQ(losses.size(), 60u);
    const double first = (losses[0] + losses[1]) / 2, last = (losses[58] + losses[59]) / 2;
    EXPECT_GT(first, 0.0);
    EXPECT_LT(last, 0.5 * first) << "first " << first << " last " << last;
    for (const auto& j : metrics(s)) EXPECT_EQ(j.value("loss_kind", ""), "kl") << j.dump();
}

// The bounded losses train too: TV alone and DSpark's mix of data CE with L1 to the target
// (measured: TV 0.57 -> 0.32, the mix 1.74 -> 1.13 over 40 steps; asked: at least a fifth off).
TEST_F(Objectives, TvAndTheDsparkMixLowerTheirLoss) {
    for (const char* loss : {"tv", "0.1*ce+0.9*l1"}) {
        SCOPED_TRACE(loss);
        std::vector<double> losses;
        const train::TrainSummary s = train(std::string("loss-") + (loss[0] == 't' ? "tv" : "mix"),
                                            {{"train.loss", loss},
                                             {"train.max_steps", "40"},
                                             {"train.lr", "1e-2"},
                                             {"train.batch_size", "2"},
                                             {"train.warmup_ratio", "0.05"}},
                                            &losses);
        ASSERT_EQ(losses.size(), 40u);
        const double first = (losses[0] + losses[1]) / 2, last = (losses[38] + losses[39]) / 2;
        EXPECT_GT(first, 0.0);
        EXPECT_LT(last, 0.8 * first) << "first " << first << " last " << last;
        for (const auto& j : metrics(s)) EXPECT_EQ(j.value("loss_kind", ""), loss) << j.dump();
    }
}

TEST_F(Objectives, BadLossIsAnErrorNamingTheSetting) {
    for (const char* loss : {"mse", "0.1*ce+", "ce+ce"}) {
        SCOPED_TRACE(loss);
        try {
            train(std::string("bad"), {{"train.loss", loss}, {"train.max_steps", "1"}});
            FAIL() << "expected an error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("train.loss"), std::string::npos) << e.what();
        }
    }
}

// CE reads only the features of target_layer_ids (the online step's target forward stops at the
// deepest of them; tests/model/target_early_stop_test.cpp counts the ops): overflowing weights in
// the layers after it and in the final norm change no loss, bit for bit, while a loss with a
// teacher term needs them and diverges at once (docs/training.md "Target layers per loss").
TEST_F(Objectives, CeSkipsTargetLayersPastTheDeepestFeatureAndKlRunsThem) {
    const auto run = [](const std::string& out, const char* target, const char* loss) {
        std::vector<double> losses;
        train::DrafterTrainJob job = test::drafter_job(dir_->path(), out);
        job.target_dir = dir_->path() / target;
        job.hooks.on_record = [&losses](const train::StepRecord& rec) {
            if (!rec.eval) losses.push_back(rec.loss);
        };
        train_drafter_from_settings(
            job, test::drafter_settings({{"train.loss", loss}, {"train.max_steps", "3"}}),
            Logger());
        return losses;
    };
    const std::vector<double> clean = run("early-clean", "target", "ce");
    const std::vector<double> poisoned = run("early-poisoned", "poisoned_target", "ce");
    ASSERT_EQ(clean.size(), 3u);
    for (const double l : clean) EXPECT_TRUE(std::isfinite(l) && l > 0) << l;
    EXPECT_EQ(poisoned, clean);
    const std::string err =
        test::error_of([&] { run("early-kl", "poisoned_target", "0.5*ce+0.5*kl"); });
    EXPECT_NE(err.find("the loss is"), std::string::npos) << err;
}

TEST_F(Objectives, CeIsTheDefaultAndNamed) {
    const train::TrainSummary s = train("ce", {{"train.max_steps", "2"}});
    const auto m = metrics(s);
    ASSERT_FALSE(m.empty());
    for (const auto& j : m) EXPECT_EQ(j.value("loss_kind", ""), "ce") << j.dump();
}

TEST_F(Objectives, KlWithSeparateDocumentsResumesBitForBit) {
    const std::vector<std::pair<std::string, std::string>> kv = {{"train.loss", "kl"},
                                                                 {"train.documents", "separate"},
                                                                 {"train.max_steps", "6"},
                                                                 {"train.checkpoint_every", "3"},
                                                                 {"train.batch_size", "2"}};
    const train::TrainSummary straight = train("straight", kv);
    EXPECT_TRUE(std::isfinite(straight.final_loss));
    EXPECT_GT(straight.final_loss, 0.0);
    train::DrafterTrainJob j = test::drafter_job(dir_->path(), "continued");
    j.resume = *dir_ / "straight" / train::checkpoint_name(3);
    const train::TrainSummary resumed =
        train_drafter_from_settings(j, config::Settings(test::registry()), Logger());
    EXPECT_EQ(resumed.first_step, 4);
    const auto a = test::read_state_tensors(straight.model_dir);
    const auto b = test::read_state_tensors(resumed.model_dir);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [name, va] : a)
        EXPECT_EQ(std::memcmp(va.data(), b.at(name).data(), va.size() * sizeof(float)), 0) << name;
}

}  // namespace
}  // namespace dflash

// Drafter training with the objectives of train.loss and train.documents (drafter_training.h):
// KL distillation lowers the KL on the CPU and metrics.jsonl says which loss it is; so do TV and
// DSpark's 0.1*ce+0.9*l1 mix; a bad train.loss is an error naming the setting; separate documents
// train, and a run of both resumes bit for bit from a checkpoint; ce stays the default.
#include <gtest/gtest.h>

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

// Evaluation's acceptance lengths and the best checkpoint (docs/training.md "Metrics", "The best
// checkpoint"): add_block_acceptance's sums on hand-made blocks; every held-out evaluation of a
// drafter writes tau_greedy and tau_prob, from anchors fixed per example (with the weights held
// still, every evaluation gives the same numbers); train.keep_best keeps the best evaluation's
// checkpoint in <run>/best/ with best.json, replaces it only when beaten, and a resumed run keeps
// knowing the value to beat.
#include <gtest/gtest.h>

#include <fstream>

#include "support/test_util.h"
#include "train/best_checkpoint.h"
#include "train/drafter_training.h"
#include "train/metrics.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

TEST(BlockAcceptance, GreedyRunsAndProbabilisticSumsOfHandMadeBlocks) {
    // Block size 4: rows k = 1..3 of each block draft tokens a+1..a+3.
    const std::vector<int32_t> tokens = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
    std::vector<uint8_t> mask(tokens.size(), 1);
    mask[6] = 0;  // block at 4: slot 2 (token 16) is not trained, so the block ends at slot 1
    const std::vector<int32_t> anchors = {0, 4, 8};
    // Block 0: slots 1, 2 right, 3 wrong -> run 2. Block 1: slot 1 right, slot 2 untrained ->
    // run 1 (slot 3, right, lies past the end). Block 2: slot 1 wrong, slot 2 past the sequence.
    const std::vector<int32_t> argmax = {-1, 11, 12, 99, -1, 15, 16, 17, -1, 98, 0, 0};
    const std::vector<float> tv = {0, 0.25f, 0.5f, 0.0f, 0, 0.1f, 0.3f, 0.0f, 0, 1.5f, 0, 0};
    train::AcceptanceSums s;
    train::add_block_acceptance(tokens, mask, anchors, 4, argmax, tv, s);
    EXPECT_EQ(s.blocks, 3.0);
    EXPECT_EQ(s.greedy_run, 3.0);
    // 0.75 + 0.75*0.5 + 0.75*0.5*1 | 0.9 | clamp(1 - 1.5) = 0.
    EXPECT_NEAR(s.prob_run, 0.75 + 0.375 + 0.375 + 0.9 + 0.0, 1e-6);
    EXPECT_NEAR(s.tau_greedy(), 2.0, 1e-12);
    EXPECT_NEAR(s.tau_prob(), 1.0 + 2.4 / 3.0, 1e-6);
    // Without tv: no probabilistic tau.
    train::AcceptanceSums g;
    train::add_block_acceptance(tokens, mask, anchors, 4, argmax, {}, g);
    EXPECT_EQ(g.greedy_run, 3.0);
    EXPECT_EQ(g.tau_prob(), 0.0);
    // A block whose first drafted token is untrained does not count.
    train::AcceptanceSums none;
    mask[1] = 0;
    train::add_block_acceptance(tokens, mask, std::vector<int32_t>{0}, 4,
                                std::vector<int32_t>{-1, 11, 12, 13}, {}, none);
    EXPECT_EQ(none.blocks, 0.0);
    EXPECT_EQ(none.tau_greedy(), 0.0);
}

class EvalBest : public test::SharedInputsTest<EvalBest> {
  public:
    static constexpr const char* kTag = "dflash-eval-best";
    static void write_inputs(const fs::path& dir) {
        test::write_pattern_dataset(dir / "data", 12, 5);
        test::write_pattern_dataset(dir / "eval", 4, 6);
        test::write_tiny_target(dir / "target");
    }

  protected:
    struct Run {
        train::TrainSummary summary;
        std::vector<train::StepRecord> evals;
    };
    static Run run(const std::string& out, std::vector<std::pair<std::string, std::string>> kv,
                   const fs::path& resume = {}) {
        train::DrafterTrainJob j = test::drafter_job(dir_->path(), out);
        j.eval_data_dir = *dir_ / "eval";
        j.resume = resume;
        Run r;
        j.hooks.on_record = [&r](const train::StepRecord& rec) {
            if (rec.eval) r.evals.push_back(rec);
        };
        r.summary = train_drafter_from_settings(j, test::drafter_settings(kv), Logger());
        return r;
    }
};

std::vector<nlohmann::json> eval_lines(const fs::path& metrics) {
    std::ifstream in(metrics);
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line);
        if (j.value("eval", false)) out.push_back(std::move(j));
    }
    return out;
}

TEST_F(EvalBest, FixedAnchorsGiveTheSameTausWhileTheWeightsStayStill) {
    // lr 0: the weights never move, so evaluations differ only if their anchors do.
    const Run r = run("still", {{"train.lr", "0"}, {"train.eval_every", "2"}});
    ASSERT_EQ(r.evals.size(), 3u);
    for (const auto& e : r.evals) {
        EXPECT_GE(e.tau_greedy, 1.0);
        EXPECT_LE(e.tau_greedy, 4.0);  // B = 4: at most 3 drafted slots + 1
        EXPECT_GE(e.tau_prob, 1.0);
        EXPECT_LE(e.tau_prob, 4.0);
        EXPECT_EQ(e.tau_greedy, r.evals[0].tau_greedy) << "step " << e.step;
        EXPECT_EQ(e.tau_prob, r.evals[0].tau_prob) << "step " << e.step;
    }
    const auto lines = eval_lines(r.summary.metrics_path);
    ASSERT_EQ(lines.size(), 3u);
    for (size_t i = 0; i < lines.size(); ++i) {
        EXPECT_DOUBLE_EQ(lines[i].at("tau_greedy").get<double>(), r.evals[i].tau_greedy);
        EXPECT_DOUBLE_EQ(lines[i].at("tau_prob").get<double>(), r.evals[i].tau_prob);
    }
    // No train.keep_best: no best directory.
    EXPECT_FALSE(fs::exists(*dir_ / "still" / train::kBestDir));
}

TEST_F(EvalBest, KeepBestKeepsTheBestEvaluationsCheckpoint) {
    const Run r = run("best", {{"train.max_steps", "8"},
                               {"train.lr", "1e-2"},
                               {"train.eval_every", "2"},
                               {"train.keep_best", "true"}});
    ASSERT_EQ(r.evals.size(), 4u);
    // The first evaluation reaching the largest tau_greedy (train.best_metric's default) is the
    // one kept (only a strictly better value replaces it).
    const train::StepRecord* best = &r.evals[0];
    for (const auto& e : r.evals)
        if (e.tau_greedy > best->tau_greedy) best = &e;
    const auto rec = train::read_best(*dir_ / "best");
    ASSERT_TRUE(rec.has_value());
    EXPECT_EQ(rec->metric, "tau_greedy");
    EXPECT_EQ(rec->step, best->step);
    EXPECT_DOUBLE_EQ(rec->value, best->tau_greedy);
    // One full checkpoint, named by step, which `latest` names and a resume can read.
    const fs::path bdir = *dir_ / "best" / train::kBestDir;
    std::vector<std::string> ckpts;
    for (const auto& e : fs::directory_iterator(bdir))
        if (e.is_directory()) ckpts.push_back(e.path().filename().string());
    ASSERT_EQ(ckpts, std::vector<std::string>{train::checkpoint_name(best->step)});
    EXPECT_EQ(train::resolve_resume_dir(bdir), bdir / ckpts[0]);
    EXPECT_EQ(train::read_training_state(bdir / ckpts[0]).step, best->step);
    EXPECT_TRUE(fs::exists(bdir / ckpts[0] / "config.json"));
    // The run's own checkpoint series is untouched by it.
    EXPECT_TRUE(fs::exists(*dir_ / "best" / train::checkpoint_name(8)));
}

TEST_F(EvalBest, AResumedRunKeepsKnowingTheBestValue) {
    const auto kv = [](const char* steps) {
        return std::vector<std::pair<std::string, std::string>>{{"train.max_steps", steps},
                                                                {"train.eval_every", "2"},
                                                                {"train.checkpoint_every", "2"},
                                                                {"train.keep_best", "true"},
                                                                {"train.lr", "1e-2"}};
    };
    run("resumed", kv("4"));
    const fs::path run_dir = *dir_ / "resumed";
    ASSERT_TRUE(train::read_best(run_dir).has_value());
    // A best value no evaluation reaches: the resumed run must leave it (and its checkpoint).
    const fs::path json = run_dir / train::kBestDir / train::kBestJson;
    const int64_t kept_step = train::read_best(run_dir)->step;
    {
        std::ofstream out(json);
        out << R"({"metric": "tau_greedy", "value": 100.0, "step": )" << kept_step << "}\n";
    }
    const auto more = kv("8");
    const Run r = run("resumed", more, run_dir / train::checkpoint_name(2));
    EXPECT_EQ(r.evals.size(), 3u);  // steps 4, 6, 8
    const auto after = train::read_best(run_dir);
    ASSERT_TRUE(after.has_value());
    EXPECT_EQ(after->value, 100.0);
    EXPECT_EQ(after->step, kept_step);
    // A record of another metric is not a value to beat: the first evaluation replaces it.
    {
        std::ofstream out(json);
        out << R"({"metric": "tau_prob", "value": 100.0, "step": 1})"
            << "\n";
    }
    const Run again = run("resumed", more, run_dir / train::checkpoint_name(6));
    ASSERT_EQ(again.evals.size(), 1u);
    const auto replaced = train::read_best(run_dir);
    ASSERT_TRUE(replaced.has_value());
    EXPECT_EQ(replaced->metric, "tau_greedy");
    EXPECT_EQ(replaced->step, 8);
    EXPECT_DOUBLE_EQ(replaced->value, again.evals[0].tau_greedy);
}

}  // namespace
}  // namespace dflash

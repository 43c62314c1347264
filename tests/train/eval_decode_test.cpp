// Evaluation by speculative decoding (train.eval_prompts, src/train/drafter_training.h): worker 0
// decodes held-out prompts greedily with the drafter's current weights, and the real acceptance
// length and histogram reach metrics.jsonl, the log and TrainSummary::final_eval.
#include <gtest/gtest.h>

#include <fstream>
#include <numeric>

#include "infer/prompts.h"
#include "infer/spec_decode.h"
#include "infer/stop_tokens.h"
#include "model/drafter.h"
#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

class EvalDecoding : public test::SharedInputsTest<EvalDecoding> {
  public:
    static constexpr const char* kTag = "dflash-eval-decode";
    static void write_inputs(const fs::path& dir) {
        test::write_pattern_dataset(dir / "data", 12, 5);
        test::write_pattern_dataset(dir / "eval", 4, 6);
        test::write_tiny_target(dir / "target");
        std::ofstream out(dir / "prompts.jsonl");
        out << R"({"prompt": "pqrs abcdeabcde"})"
            << "\n"
            << R"({"prompt_ids": [1, 112, 113, 97, 98, 99], "label": "ids"})"
            << "\n"
            << R"({"prompt": "qq cdeab"})"
            << "\n";
    }

  protected:
    static train::DrafterTrainJob job(const std::string& out) {
        train::DrafterTrainJob j = test::drafter_job(dir_->path(), out);
        j.eval_prompts = *dir_ / "prompts.jsonl";
        return j;
    }
};

std::vector<nlohmann::json> eval_records(const fs::path& metrics) {
    std::ifstream in(metrics);
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(in, line)) {
        auto j = nlohmann::json::parse(line);
        if (j.value("eval", false)) out.push_back(std::move(j));
    }
    return out;
}

// The drafter of a checkpoint with its fp32 master weights (what the evaluation decoded with).
DrafterModel master_drafter(const fs::path& ckpt) {
    DrafterModel m(test::host_backend(), DrafterConfig::load(ckpt));
    const auto state = test::read_state_tensors(ckpt);
    for (const Param& p : m.params().params()) {
        const auto& v = state.at("master." + p.name);
        EXPECT_EQ(static_cast<int64_t>(v.size()), p.value.numel()) << p.name;
        std::copy(v.begin(), v.end(), p.value.f32());
    }
    return m;
}

TEST_F(EvalDecoding, RealTauReachesMetricsAndSummary) {
    auto j = job("with-data");
    j.eval_data_dir = *dir_ / "eval";
    std::vector<train::StepRecord> evals;
    j.hooks.on_record = [&evals](const train::StepRecord& r) {
        if (r.eval) evals.push_back(r);
    };
    const auto s = test::drafter_settings({{"train.max_steps", "4"},
                                           {"train.eval_every", "2"},
                                           {"train.eval_prompt_count", "2"},
                                           {"train.eval_max_new_tokens", "20"}});
    const train::TrainSummary sum = train_drafter_from_settings(j, s, Logger());

    // Evaluations at steps 2 and 4, each with the held-out loss and the decoding figures.
    ASSERT_EQ(evals.size(), 2u);
    for (const auto& r : evals) {
        ASSERT_TRUE(r.decode.has_value()) << "step " << r.step;
        const train::DecodeEval& d = *r.decode;
        EXPECT_EQ(d.prompts, 2);              // train.eval_prompt_count of the file's 3
        ASSERT_EQ(d.accept_hist.size(), 5u);  // n = 0..B, B = 4
        EXPECT_EQ(d.accept_hist[0], 0);
        EXPECT_EQ(std::accumulate(d.accept_hist.begin(), d.accept_hist.end(), int64_t{0}), d.steps);
        EXPECT_GT(d.steps, 0);
        EXPECT_LE(d.new_tokens, 2 * 20);
        // Every step commits at least one token and at most B.
        EXPECT_GE(d.tau(), 1.0);
        EXPECT_LE(d.tau(), 4.0);
        EXPECT_DOUBLE_EQ(d.tau(), static_cast<double>(d.new_tokens - d.prompts) / d.steps);
        EXPECT_TRUE(r.has_loss);
        EXPECT_GT(r.loss, 0.0);
    }
    ASSERT_TRUE(sum.final_eval.has_value());
    ASSERT_TRUE(sum.final_eval->decode.has_value());
    EXPECT_EQ(sum.final_eval->step, 4);
    EXPECT_DOUBLE_EQ(sum.final_eval->decode->tau(), evals.back().decode->tau());

    const auto recs = eval_records(sum.metrics_path);
    ASSERT_EQ(recs.size(), 2u);
    for (size_t i = 0; i < recs.size(); ++i) {
        const auto& rec = recs[i];
        const train::DecodeEval& d = *evals[i].decode;
        EXPECT_EQ(rec["step"], evals[i].step);
        ASSERT_TRUE(rec.contains("tau")) << rec.dump();
        EXPECT_DOUBLE_EQ(rec["tau"].get<double>(), d.tau());
        EXPECT_EQ(rec["accept_hist"].get<std::vector<int64_t>>(), d.accept_hist);
        EXPECT_EQ(rec["decode_steps"].get<int64_t>(), d.steps);
        EXPECT_TRUE(rec.contains("loss"));
    }

    // The evaluation decoded with the weights of its step: the same engine, given the fp32
    // masters of the final checkpoint, reproduces the final evaluation exactly.
    const DrafterModel drafter = master_drafter(sum.model_dir);
    const TargetModel target = TargetModel::load(test::host_backend(), *dir_ / "target");
    const auto tok = load_tokenizer_for_model(*dir_ / "target");
    const auto prompts = read_prompts(*dir_ / "prompts.jsonl", tok.get(), 0);
    auto be = make_cpu_backend(1);
    SpeculativeEngine engine(target, &drafter, *be);
    GenerateOptions opt;
    opt.max_new_tokens = 20;
    opt.stop_tokens = default_stop_tokens(target.config(), tok.get());
    int64_t steps = 0, fresh = 0;
    std::vector<int64_t> hist(5, 0);
    for (size_t p = 0; p < 2; ++p) {
        const GenerateResult g = engine.generate(prompts[p].tokens, opt);
        steps += g.stats.steps;
        fresh += g.stats.new_tokens - 1;
        for (size_t n = 0; n < hist.size(); ++n) hist[n] += g.stats.accept_hist[n];
    }
    EXPECT_EQ(hist, sum.final_eval->decode->accept_hist);
    EXPECT_EQ(steps, sum.final_eval->decode->steps);
    EXPECT_DOUBLE_EQ(static_cast<double>(fresh) / steps, sum.final_eval->decode->tau());
}

TEST_F(EvalDecoding, PromptsAloneStillEvaluate) {
    // No held-out data: the evaluations decode only, and their records carry no loss.
    const auto s = test::drafter_settings(
        {{"train.max_steps", "2"}, {"train.eval_every", "1"}, {"train.eval_max_new_tokens", "8"}});
    const train::TrainSummary sum = train_drafter_from_settings(job("prompts-only"), s, Logger());
    ASSERT_TRUE(sum.final_eval.has_value());
    EXPECT_FALSE(sum.final_eval->has_loss);
    ASSERT_TRUE(sum.final_eval->decode.has_value());
    EXPECT_EQ(sum.final_eval->decode->prompts, 3);
    const auto recs = eval_records(sum.metrics_path);
    ASSERT_EQ(recs.size(), 2u);
    for (const auto& rec : recs) {
        EXPECT_FALSE(rec.contains("loss")) << rec.dump();
        EXPECT_GE(rec["tau"].get<double>(), 1.0) << rec.dump();
    }
}

TEST_F(EvalDecoding, NoPromptsNoDecoding) {
    auto j = job("no-prompts");
    j.eval_prompts.clear();
    j.eval_data_dir = *dir_ / "eval";
    const auto s = test::drafter_settings({{"train.max_steps", "2"}});
    const train::TrainSummary sum = train_drafter_from_settings(j, s, Logger());
    ASSERT_TRUE(sum.final_eval.has_value());
    EXPECT_FALSE(sum.final_eval->decode.has_value());
    for (const auto& rec : eval_records(sum.metrics_path)) EXPECT_FALSE(rec.contains("tau"));
}

TEST_F(EvalDecoding, BadPromptFileIsAClearError) {
    std::ofstream(*dir_ / "bad.jsonl") << "{\"nothing\": 1}\n";
    auto j = job("bad-prompts");
    j.eval_prompts = *dir_ / "bad.jsonl";
    try {
        train_drafter_from_settings(j, test::drafter_settings(), Logger());
        FAIL() << "a prompt file without prompts must be refused";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("bad.jsonl:1"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace dflash

// DSpark's evaluation metrics (recipe spec §1.5; docs/training.md "Metrics"): tau_probabilistic,
// accept_rate per slot and the confidence head's abs error, bias and cumulative-product bias on a
// hand-made case worked out below, with decay weights, the packing that sums them over workers,
// the eval record fields, and a tiny DSpark run (rnn head) whose held-out evaluations write them.
#include <gtest/gtest.h>

#include <cmath>

#include "train/drafter_training.h"
#include "train/metrics.h"
#include "train_fixtures.h"

namespace dflash::train {
namespace {

double logit(double c) {
    return std::log(c / (1 - c));
}

// Block size 3, sequence of 8 with token 6 untrained. Block 0 (anchor 0) drafts tokens 1..3, all
// trained; block 1 (anchor 4) drafts token 5, then token 6 is untrained, which ends the block.
// acc = clamp(1 - tv, 0, 1): block 0: 0.8, 0.5, 0 (tv 1.5 clamps); block 1: 0.6.
// Confidences c: block 0: 0.5, 0.75, 0.5; block 1: 0.2 (rows past the end carry junk).
struct HandCase {
    std::vector<uint8_t> mask = {1, 1, 1, 1, 1, 1, 0, 1};
    std::vector<int32_t> anchors = {0, 4};
    std::vector<float> tv = {0.2f, 0.5f, 1.5f, 0.4f, 0.9f, 0.0f};
    std::vector<float> conf = {static_cast<float>(logit(0.5)),
                               static_cast<float>(logit(0.75)),
                               static_cast<float>(logit(0.5)),
                               static_cast<float>(logit(0.2)),
                               5.0f,
                               -5.0f};
};

TEST(DsparkMetrics, HandMadeBlocks) {
    const HandCase h;
    DsparkMetricSums s;
    add_dspark_metrics(h.mask, h.anchors, 3, 0.0, h.tv, h.conf, s);
    const auto m = s.metrics();
    ASSERT_TRUE(m.has_value());
    // tau: block 0: 1 + 0.8 + 0.8*0.5 + 0 = 2.2; block 1: 1 + 0.6 = 1.6; mean 1.9.
    EXPECT_NEAR(m->tau_probabilistic, 1.9, 1e-6);
    ASSERT_EQ(m->accept_rate.size(), 3u);
    EXPECT_NEAR(m->accept_rate[0], 0.7, 1e-6);  // (0.8 + 0.6) / 2
    EXPECT_NEAR(m->accept_rate[1], 0.5, 1e-6);
    EXPECT_NEAR(m->accept_rate[2], 0.0, 1e-6);
    ASSERT_TRUE(m->has_confidence);
    // c - acc over the 4 valid slots: -0.3, 0.25, 0.5, -0.4.
    EXPECT_NEAR(m->confidence_abs_error, 1.45 / 4, 1e-6);
    EXPECT_NEAR(m->confidence_bias, 0.05 / 4, 1e-6);
    // Prefix products: c 0.5, 0.375, 0.1875 | 0.2; acc 0.8, 0.4, 0 | 0.6.
    EXPECT_NEAR(m->confidence_cumprod_bias, (-0.3 - 0.025 + 0.1875 - 0.4) / 4, 1e-6);
}

// With decay gamma the confidence terms weigh slot k by exp(-k / gamma); tau and accept_rate
// stay unweighted. Without a confidence head there are no confidence terms.
TEST(DsparkMetrics, DecayWeightsAndNoConfidenceHead) {
    const HandCase h;
    DsparkMetricSums s;
    add_dspark_metrics(h.mask, h.anchors, 3, 2.0, h.tv, h.conf, s);
    const auto m = s.metrics();
    ASSERT_TRUE(m.has_value());
    EXPECT_NEAR(m->tau_probabilistic, 1.9, 1e-6);
    const double w1 = std::exp(-0.5), w2 = std::exp(-1.0);
    const double W = 1 + w1 + w2 + 1;
    EXPECT_NEAR(m->confidence_abs_error, (0.3 + 0.25 * w1 + 0.5 * w2 + 0.4) / W, 1e-6);
    EXPECT_NEAR(m->confidence_bias, (-0.3 + 0.25 * w1 + 0.5 * w2 - 0.4) / W, 1e-6);
    DsparkMetricSums bare;
    add_dspark_metrics(h.mask, h.anchors, 3, 0.0, h.tv, {}, bare);
    EXPECT_FALSE(bare.metrics()->has_confidence);
    EXPECT_NEAR(bare.metrics()->tau_probabilistic, 1.9, 1e-6);
    // No block whose slot 0 is trained: no metrics.
    DsparkMetricSums none;
    const std::vector<uint8_t> untrained(8, 0);
    add_dspark_metrics(untrained, h.anchors, 3, 0.0, h.tv, h.conf, none);
    EXPECT_FALSE(none.metrics().has_value());
}

// Sums over micro-batches and workers: each block on its own, packed and summed element-wise as
// the workers' all-reduce does, equals both blocks at once; the record carries the fields.
TEST(DsparkMetrics, PackedSumsAddUpAndReachTheRecord) {
    const HandCase h;
    DsparkMetricSums both, first, second;
    add_dspark_metrics(h.mask, h.anchors, 3, 0.0, h.tv, h.conf, both);
    add_dspark_metrics(h.mask, std::vector<int32_t>{0}, 3, 0.0,
                       std::span<const float>(h.tv).subspan(0, 3),
                       std::span<const float>(h.conf).subspan(0, 3), first);
    add_dspark_metrics(h.mask, std::vector<int32_t>{4}, 3, 0.0,
                       std::span<const float>(h.tv).subspan(3, 3),
                       std::span<const float>(h.conf).subspan(3, 3), second);
    std::vector<double> packed = first.pack(3);
    const std::vector<double> other = second.pack(3);
    ASSERT_EQ(packed.size(), 12u);
    for (size_t i = 0; i < packed.size(); ++i) packed[i] += other[i];
    const auto summed = DsparkMetricSums::unpack(packed, 3).metrics();
    const auto whole = both.metrics();
    ASSERT_TRUE(summed && whole);
    EXPECT_NEAR(summed->tau_probabilistic, whole->tau_probabilistic, 1e-12);
    EXPECT_NEAR(summed->confidence_cumprod_bias, whole->confidence_cumprod_bias, 1e-12);
    EXPECT_EQ(summed->accept_rate, whole->accept_rate);
    StepRecord r;
    r.eval = true;
    r.dspark = whole;
    const nlohmann::json j = record_json(r);
    EXPECT_NEAR(j["tau_probabilistic"].get<double>(), 1.9, 1e-6);
    EXPECT_EQ(j["accept_rate"].size(), 3u);
    EXPECT_NEAR(j["confidence_abs_error"].get<double>(), 1.45 / 4, 1e-6);
    EXPECT_TRUE(j.contains("confidence_bias"));
    EXPECT_TRUE(j.contains("confidence_cumprod_bias"));
}

// Every held-out evaluation of a DSpark run carries the metrics, in range, with B = 4 slots; a
// DFlash run's evaluations carry none.
TEST(DsparkMetrics, EvaluationsOfADsparkRunWriteThem) {
    test::TempDir dir("dflash-dspark-metrics");
    test::write_pattern_dataset(dir.path() / "data", 12, 5);
    test::write_pattern_dataset(dir.path() / "eval", 4, 6);
    test::write_tiny_target(dir.path() / "target");
    for (const bool dspark : {true, false}) {
        DrafterTrainJob j = test::drafter_job(dir.path(), dspark ? "dspark" : "dflash");
        j.eval_data_dir = dir.path() / "eval";
        std::vector<StepRecord> evals;
        j.hooks.on_record = [&evals](const StepRecord& rec) {
            if (rec.eval) evals.push_back(rec);
        };
        std::vector<std::pair<std::string, std::string>> kv = {{"train.eval_every", "3"}};
        if (dspark) {
            kv.push_back({"drafter.architecture", "dspark"});
            kv.push_back({"drafter.markov_rank", "4"});
            kv.push_back({"drafter.markov_head_type", "rnn"});
        }
        train_drafter_from_settings(j, test::drafter_settings(kv), Logger());
        ASSERT_EQ(evals.size(), 2u);
        for (const StepRecord& e : evals) {
            ASSERT_EQ(e.dspark.has_value(), dspark) << "step " << e.step;
            if (!dspark) continue;
            EXPECT_GE(e.dspark->tau_probabilistic, 1.0);
            EXPECT_LE(e.dspark->tau_probabilistic, 5.0);
            ASSERT_EQ(e.dspark->accept_rate.size(), 4u);
            for (double a : e.dspark->accept_rate) {
                EXPECT_GE(a, 0.0);
                EXPECT_LE(a, 1.0);
            }
            ASSERT_TRUE(e.dspark->has_confidence);
            EXPECT_GT(e.dspark->confidence_abs_error, 0.0);
            EXPECT_LE(e.dspark->confidence_abs_error, 1.0);
            EXPECT_LE(std::fabs(e.dspark->confidence_bias), e.dspark->confidence_abs_error + 1e-12);
        }
    }
}

}  // namespace
}  // namespace dflash::train

// The training semantics of docs/training.md "The loss over the optimizer window" and "D-PACE":
// on sequences whose loss weight sums differ, 1 worker x 4 micro-batches, 4 workers x 1 and 2 x 2
// train to the same weights (the loss is normalised over the whole window, not per micro-batch);
// and a D-PACE run learns.
#include <gtest/gtest.h>

#include <cmath>

#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

using TrainRun = test::RecordedRun;
using KeyValues = std::vector<std::pair<std::string, std::string>>;

// Samples of the period-5 pattern language of write_pattern_dataset, one per training sequence
// (data.pack = false), with response lengths from 2 to 31 tokens: with 6 anchors of block 4 a
// sequence has between 1 and 6 anchors and a weight sum between 1 and about 14. A normaliser
// taken over part of the window (each worker's sequences, or each micro-step's) then changes with
// the layout; normalising each worker by its own weight sum misses the 1e-5 tolerance below by
// far (the first step's gradient norms differ by ~1e-3 relative). (Normalising each sequence by its
// own sum would not: a micro-batch is one sequence here, so that rule does not depend on the
// layout; the trainer has no such mode.)
void write_uneven_dataset(const std::filesystem::path& dir, int64_t samples, uint64_t seed) {
    std::filesystem::create_directories(dir);
    const auto tok = make_byte_tokenizer();
    ShardWriter w(dir / "shard-00000.dfshard", tok->name(), tok->vocab_size());
    Rng rng(seed);
    for (int64_t i = 0; i < samples; ++i) {
        Encoded e;
        e.tokens.push_back(tok->specials().bos);
        e.loss_mask.push_back(0);
        const int64_t prompt = 1 + static_cast<int64_t>(rng.below(6));
        for (int64_t k = 0; k < prompt; ++k) {
            e.tokens.push_back(static_cast<int32_t>('p' + rng.below(4)));
            e.loss_mask.push_back(0);
        }
        const uint64_t phase = rng.below(5);
        const int64_t response = 2 + (i * 7) % 30;
        for (int64_t k = 0; k < response; ++k) {
            e.tokens.push_back(static_cast<int32_t>("abcde"[(phase + k) % 5]));
            e.loss_mask.push_back(1);
        }
        w.add(e);
    }
    w.finish();
}

class TrainingSemantics : public test::SharedInputsTest<TrainingSemantics> {
  public:
    static constexpr const char* kTag = "dflash-semantics";
    static void write_inputs(const std::filesystem::path& dir) {
        write_uneven_dataset(dir / "data", 48, 3);
        test::write_tiny_target(dir / "target");
    }

    static TrainRun train(const std::string& out, KeyValues kv) {
        kv.emplace_back("data.pack", "false");
        return test::train_recorded(dir_->path(), out, kv);
    }
};

// Agreement to float rounding (the gradient sums are taken in other orders): 1e-5 relative on
// every step's loss and gradient norm, and per tensor on the fp32 masters and both AdamW moments
// after 6 steps. Clipping is off: it would hide a uniform scale of the gradients in the norm,
// while the moments show it.
void expect_same_training(const TrainRun& a, const TrainRun& b, const std::string& what) {
    ASSERT_EQ(a.losses.size(), 6u) << what;
    ASSERT_EQ(b.losses.size(), 6u) << what;
    for (size_t i = 0; i < a.losses.size(); ++i) {
        EXPECT_NEAR(a.losses[i], b.losses[i], 1e-5 * std::abs(b.losses[i]))
            << what << " step " << i + 1;
        EXPECT_NEAR(a.grad_norms[i], b.grad_norms[i], 1e-5 * std::abs(b.grad_norms[i]))
            << what << " step " << i + 1;
    }
    const auto sa = test::read_state_tensors(a.summary.model_dir);
    const auto sb = test::read_state_tensors(b.summary.model_dir);
    EXPECT_LT(test::max_state_rel_diff(sa, sb, "master."), 1e-5) << what;
    EXPECT_LT(test::max_state_rel_diff(sa, sb, "adam_m."), 1e-5) << what;
    EXPECT_LT(test::max_state_rel_diff(sa, sb, "adam_v."), 1e-5) << what;
}

void expect_layouts_agree(const std::string& tag, const KeyValues& extra) {
    const auto run = [&](const std::string& name, KeyValues kv) {
        kv.emplace_back("train.grad_clip", "0");
        kv.insert(kv.end(), extra.begin(), extra.end());
        return TrainingSemantics::train(tag + "-" + name, kv);
    };
    const TrainRun one_by_four = run("w1a4", {{"train.accumulation", "4"}});
    const TrainRun four_by_one = run("w4a1", {{"runtime.devices", "4"}});
    const TrainRun two_by_two =
        run("w2a2", {{"runtime.devices", "2"}, {"train.accumulation", "2"}});
    expect_same_training(four_by_one, one_by_four, "4 workers x 1 vs 1 x 4");
    expect_same_training(two_by_two, one_by_four, "2 workers x 2 vs 1 x 4");
}

TEST_F(TrainingSemantics, WindowNormalisedLossIsLayoutInvariant) {
    expect_layouts_agree("decay", {});
}

// D-PACE's normaliser, the count of trained slots, is known before the forward like the decay
// weights' sum, so its loss is window-normalised and layout-invariant too.
TEST_F(TrainingSemantics, DpaceLossIsLayoutInvariant) {
    expect_layouts_agree("dpace", {{"train.loss_weighting", "dpace"}});
}

// A D-PACE run learns the pattern language: the loss falls far (from about 3.2 to about 0.15; it
// falls more slowly than the CE does, since the weights grow as the draft improves) and every
// slot's accuracy ends above 0.8.
TEST_F(TrainingSemantics, DpaceLossFalls) {
    const TrainRun r = train("dpace-learn", {{"train.loss_weighting", "dpace"},
                                             {"train.max_steps", "300"},
                                             {"train.lr", "1e-2"},
                                             {"train.batch_size", "2"},
                                             {"train.warmup_ratio", "0.05"}});
    ASSERT_EQ(r.losses.size(), 300u);
    const double first = (r.losses[0] + r.losses[1]) / 2;
    const double last = (r.losses[298] + r.losses[299]) / 2;
    EXPECT_LT(last, 0.25 * first) << "first " << first << " last " << last;
    ASSERT_EQ(r.summary.acc.size(), 3u);
    for (double a : r.summary.acc) EXPECT_GT(a, 0.8);
}

}  // namespace
}  // namespace dflash

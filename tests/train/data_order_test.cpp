// data.shuffle (src/train/trainer.h training_loader_options, src/options/data_options.h,
// src/data/dataset.h LoaderOptions):
// false reads every epoch in dataset order; true shuffles each epoch differently. The trainer's
// loader options carry the setting.
#include <gtest/gtest.h>

#include <numeric>

#include "data/dataset.h"
#include "options/training.h"
#include "support/test_util.h"
#include "train/trainer.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

// The trainer's loader options from settings typed as the training commands type them.
LoaderOptions loader_options_of(const config::Settings& s, int64_t max_length, int rank) {
    return train::training_loader_options(training_options_from_settings(s), max_length, rank);
}

// The samples of every sequence of one worker's epoch, in reading order.
std::vector<int64_t> epoch_order(const PackedLoader& l, int64_t epoch) {
    std::vector<int64_t> out;
    for (int64_t c = 0; c < l.sequences_in_epoch(epoch); ++c) {
        const auto s = l.sequence_samples(epoch, c);
        out.insert(out.end(), s.begin(), s.end());
    }
    return out;
}

class DataOrder : public test::SharedInputsTest<DataOrder> {
  public:
    static constexpr const char* kTag = "dflash-data-order";
    static void write_inputs(const std::filesystem::path& dir) {
        test::write_pattern_dataset(dir / "data", 20, 11);
    }
};

TEST_F(DataOrder, TrainerPassesTheSettings) {
    const auto off = loader_options_of(test::drafter_settings({{"data.shuffle", "false"},
                                                               {"data.pack", "false"},
                                                               {"runtime.seed", "9"},
                                                               {"runtime.devices", "2"}}),
                                       64, 1);
    EXPECT_FALSE(off.shuffle);
    EXPECT_FALSE(off.packing);
    EXPECT_EQ(off.seed, 9u);
    EXPECT_EQ(off.max_length, 64);
    EXPECT_EQ(off.rank, 1);
    EXPECT_EQ(off.world, 2);
    EXPECT_TRUE(loader_options_of(test::drafter_settings(), 64, 0).shuffle);
}

TEST_F(DataOrder, NoShuffleReadsTheDatasetInOrderEveryEpoch) {
    const ShardedDataset ds = ShardedDataset::open(*dir_ / "data");
    std::vector<int64_t> identity(20);
    std::iota(identity.begin(), identity.end(), int64_t{0});
    for (const bool packing : {false, true}) {
        auto o = loader_options_of(test::drafter_settings({{"data.shuffle", "false"}}), 64, 0);
        o.packing = packing;
        const PackedLoader l(ds, o);
        for (int64_t e : {0, 1, 2}) EXPECT_EQ(epoch_order(l, e), identity) << "epoch " << e;
    }
    // Two workers split the ordered sequences round-robin.
    auto o = loader_options_of(
        test::drafter_settings({{"data.shuffle", "false"}, {"runtime.devices", "2"}}), 64, 1);
    o.packing = false;
    const PackedLoader second(ds, o);
    EXPECT_EQ(second.sequence_samples(0, 0), std::vector<int64_t>{1});
    EXPECT_EQ(second.sequence_samples(1, 2), std::vector<int64_t>{5});
}

TEST_F(DataOrder, ShuffleChangesTheOrderEachEpoch) {
    const ShardedDataset ds = ShardedDataset::open(*dir_ / "data");
    auto o = loader_options_of(test::drafter_settings(), 64, 0);
    o.packing = false;
    const PackedLoader l(ds, o);
    const auto e0 = epoch_order(l, 0), e1 = epoch_order(l, 1);
    std::vector<int64_t> identity(20);
    std::iota(identity.begin(), identity.end(), int64_t{0});
    // 20 samples: a shuffle that leaves them in order, or repeats itself, is a 1 in 20! event.
    EXPECT_NE(e0, identity);
    EXPECT_NE(e0, e1);
    auto sorted = e0;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity);  // a permutation: every sample once
}

}  // namespace
}  // namespace dflash

// Optimizer-state sharding (train.shard_optimizer_state; Note [Optimizer-state sharding] in
// src/train/gradient_exchange.cpp): FlatShard covers every element once, aligned; through the host
// a sharded run is bitwise the unsharded run of the same workers (losses, gradient norms, every
// master weight and moment of the checkpoint), clipping on or off; each worker keeps only its share
// of the moments; a sharded checkpoint holds every moment and resumes, sharded or not, to the bits
// of the uninterrupted run.
#include <gtest/gtest.h>

#include <cstring>

#include "support/test_util.h"
#include "train/checkpoint.h"
#include "train/drafter_training.h"
#include "train/optimizer.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

using train::FlatShard;

TEST(FlatShard, ChunksAreAlignedAndWithTheTailCoverEveryElementOnce) {
    for (int64_t n : {0, 1, 63, 64, 1000, 10001, 1 << 20, 123457}) {
        for (int world : {1, 2, 3, 7, 8}) {
            std::vector<int> covered(static_cast<size_t>(n), 0);
            int64_t owned_total = 0;
            for (int r = 0; r < world; ++r) {
                const FlatShard s = FlatShard::of(n, world, r);
                EXPECT_EQ(s.chunk % FlatShard::kAlign, 0);
                EXPECT_EQ(s.begin(), r * s.chunk);
                EXPECT_LE(s.tail(), n);
                if (world > 1) {
                    EXPECT_LT(n - s.tail(), world * (FlatShard::kAlign + 1));
                }
                for (int64_t i = s.begin(); i < s.end(); ++i) ++covered[static_cast<size_t>(i)];
                owned_total += s.chunk;
                EXPECT_EQ(s.owned(), s.chunk + n - s.tail());
                if (world == 1) {
                    EXPECT_FALSE(s.sharded());
                }
            }
            const FlatShard s0 = FlatShard::of(n, world, 0);
            for (int64_t i = s0.tail(); i < n; ++i) ++covered[static_cast<size_t>(i)];
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(covered[static_cast<size_t>(i)], 1) << n << " " << world << " " << i;
            EXPECT_EQ(owned_total + n - s0.tail(), n);
        }
    }
}

using ShardRun = test::RecordedRun;

class ShardedTraining : public test::SharedInputsTest<ShardedTraining> {
  public:
    static constexpr const char* kTag = "dflash-shard";
    static void write_inputs(const std::filesystem::path& dir) {
        test::write_pattern_dataset(dir / "data", 24, 1);
        test::write_tiny_target(dir / "target");
    }

  protected:
    static ShardRun train(const std::string& out,
                          std::vector<std::pair<std::string, std::string>> kv,
                          const std::filesystem::path& resume = {}) {
        kv.emplace_back("train.checkpoint_every", "3");
        return test::train_recorded(dir_->path(), out, kv, resume);
    }
};

void expect_bitwise(const ShardRun& a, const ShardRun& b, const std::filesystem::path& ckpt_a,
                    const std::filesystem::path& ckpt_b) {
    ASSERT_EQ(a.losses.size(), b.losses.size());
    for (size_t i = 0; i < a.losses.size(); ++i) {
        EXPECT_EQ(a.losses[i], b.losses[i]) << "step " << i + 1;
        EXPECT_EQ(a.grad_norms[i], b.grad_norms[i]) << "step " << i + 1;
    }
    test::expect_same_state(ckpt_a, ckpt_b);
}

TEST_F(ShardedTraining, ThroughTheHostShardedEqualsUnshardedBitForBit) {
    for (const char* workers : {"2", "3"}) {
        for (const char* clip : {"0", "0.05"}) {  // 0.05 clips every step of this run
            SCOPED_TRACE(std::string("workers ") + workers + ", grad_clip " + clip);
            const std::string tag = std::string(workers) + "-" + clip;
            const ShardRun plain =
                train("plain-" + tag, {{"runtime.devices", workers}, {"train.grad_clip", clip}});
            const ShardRun sharded =
                train("sharded-" + tag, {{"runtime.devices", workers},
                                         {"train.grad_clip", clip},
                                         {"train.shard_optimizer_state", "true"}});
            ASSERT_EQ(plain.losses.size(), 6u);
            if (std::string(clip) != "0") {
                for (double g : plain.grad_norms) EXPECT_GT(g, 0.05);  // clipping was active
            }
            expect_bitwise(sharded, plain, sharded.summary.model_dir, plain.summary.model_dir);
        }
    }
}

TEST(FlatShard, EachWorkerKeepsItsShareOfTheMoments) {
    // The optimizer of worker r of 3 holds its chunk and the tail, no more.
    auto be = make_cpu_backend(1);
    ParamSet ps(*be, {{"a", {3, 1000}}, {"b", {17}}});
    ps.enable_training();
    const int64_t n = ps.numel();
    int64_t total = 0;
    for (int r = 0; r < 3; ++r) {
        const FlatShard s = FlatShard::of(n, 3, r);
        const train::AdamW opt(ps, {}, s);
        EXPECT_EQ(opt.m().numel(), s.owned());
        EXPECT_EQ(opt.v().numel(), s.owned());
        EXPECT_LT(opt.m().numel(), n / 3 + 3 * (FlatShard::kAlign + 1));
        total += s.chunk;
    }
    EXPECT_EQ(total + n - FlatShard::of(n, 3, 0).tail(), n);
}

TEST_F(ShardedTraining, ASharedCheckpointResumesShardedOrNotToTheSameBits) {
    const std::vector<std::pair<std::string, std::string>> two = {
        {"runtime.devices", "2"}, {"train.shard_optimizer_state", "true"}};
    const ShardRun straight = train("straight", two);
    const auto ck3 = straight.summary.run_dir / train::checkpoint_name(3);
    const ShardRun sharded = train("resumed-sharded", two, ck3);
    const ShardRun plain = train("resumed-plain", {{"runtime.devices", "2"}}, ck3);
    ASSERT_EQ(sharded.summary.first_step, 4);
    const auto last = [](const ShardRun& r) { return r.summary.model_dir; };
    ShardRun tail;  // the straight run's steps 4..6
    tail.losses.assign(straight.losses.begin() + 3, straight.losses.end());
    tail.grad_norms.assign(straight.grad_norms.begin() + 3, straight.grad_norms.end());
    expect_bitwise(sharded, tail, last(sharded), last(straight));
    expect_bitwise(plain, tail, last(plain), last(straight));
    // And with three workers sharded: the moments are taken from the file whatever the layout.
    const ShardRun three = train("resumed-three",
                                 {{"runtime.devices", "3"},
                                  {"train.shard_optimizer_state", "true"},
                                  {"train.max_steps", "5"}},
                                 straight.summary.run_dir / train::checkpoint_name(3));
    EXPECT_EQ(three.losses.size(), 2u);
}

}  // namespace
}  // namespace dflash

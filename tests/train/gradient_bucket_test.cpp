// Gradient buckets (Note [Gradient buckets] in src/train/gradient_exchange.h) and the sharded
// update inside the recorded step (Note [Optimizer-state sharding]), run through the CPU backend's
// device collectives (backend/cpu/host_collectives.h, runtime.gradient_exchange=device): the
// bucketed sums, sent as the backward finishes each range (Note [Final gradients]), give the
// bits of one sum after the backward, for drafters and pretraining, with accumulation; a bucket
// sent before its gradients were final would miss the rest of the backward and change them. The
// sharded update's norm is the sum of the chunks' and the tail's, so it rounds differently: with
// clipping off the weights still match bit for bit.
#include <gtest/gtest.h>

#include <cstring>

#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

using BucketRun = test::RecordedRun;

class GradientBuckets : public test::SharedInputsTest<GradientBuckets> {
  public:
    static constexpr const char* kTag = "dflash-buckets";
    static void write_inputs(const std::filesystem::path& dir) {
        test::write_pattern_dataset(dir / "data", 24, 1);
        test::write_tiny_target(dir / "target");
    }

  protected:
    static BucketRun train(const std::string& out,
                           std::vector<std::pair<std::string, std::string>> kv) {
        kv.emplace_back("drafter.num_layers", "2");  // two layers: buckets finish at each
        return test::train_recorded(dir_->path(), out, kv);
    }
};

void expect_same_weights(const BucketRun& a, const BucketRun& b) {
    test::expect_same_state(a.summary.model_dir, b.summary.model_dir);
}

TEST_F(GradientBuckets, BucketedSumsDuringTheBackwardEqualOneSumAfterIt) {
    for (const char* accumulation : {"1", "2"}) {
        SCOPED_TRACE(std::string("accumulation ") + accumulation);
        const std::string tag = accumulation;
        const std::vector<std::pair<std::string, std::string>> base = {
            {"runtime.devices", "2"}, {"train.accumulation", accumulation}};
        auto with = [&](std::vector<std::pair<std::string, std::string>> kv) {
            kv.insert(kv.begin(), base.begin(), base.end());
            return kv;
        };
        const BucketRun host = train("host-" + tag, with({{"runtime.gradient_exchange", "host"}}));
        // 4 KiB buckets: many per layer, so most are sent before the backward ends.
        const BucketRun buckets =
            train("buckets-" + tag, with({{"runtime.gradient_exchange", "device"},
                                          {"runtime.gradient_bucket_mb", "0.004"}}));
        const BucketRun whole = train("whole-" + tag, with({{"runtime.gradient_exchange", "device"},
                                                            {"runtime.gradient_bucket_mb", "0"}}));
        ASSERT_EQ(host.losses.size(), 6u);
        for (const BucketRun* r : {&buckets, &whole}) {
            ASSERT_EQ(r->losses.size(), host.losses.size());
            for (size_t i = 0; i < host.losses.size(); ++i) {
                EXPECT_EQ(r->losses[i], host.losses[i]) << "step " << i + 1;
                EXPECT_EQ(r->grad_norms[i], host.grad_norms[i]) << "step " << i + 1;
            }
            expect_same_weights(*r, host);
        }
    }
}

TEST_F(GradientBuckets, TheShardedUpdateInsideTheStepMatchesTheHostsWeights) {
    for (const char* workers : {"2", "3"}) {
        SCOPED_TRACE(std::string("workers ") + workers);
        const std::vector<std::pair<std::string, std::string>> common = {
            {"runtime.devices", workers},
            {"train.grad_clip", "0"},
            {"train.shard_optimizer_state", "true"}};
        auto with = [&](std::vector<std::pair<std::string, std::string>> kv) {
            kv.insert(kv.begin(), common.begin(), common.end());
            return kv;
        };
        const std::string tag = workers;
        const BucketRun host =
            train("sh-host-" + tag, with({{"runtime.gradient_exchange", "host"}}));
        const BucketRun device =
            train("sh-device-" + tag, with({{"runtime.gradient_exchange", "device"}}));
        ASSERT_EQ(device.losses.size(), host.losses.size());
        for (size_t i = 0; i < host.losses.size(); ++i) {
            EXPECT_EQ(device.losses[i], host.losses[i]) << "step " << i + 1;
            EXPECT_NEAR(device.grad_norms[i], host.grad_norms[i], 1e-6 * host.grad_norms[i])
                << "step " << i + 1;
        }
        expect_same_weights(device, host);
    }
}

}  // namespace
}  // namespace dflash

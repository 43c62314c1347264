// The host memory of checkpoints (Note [Checkpoint snapshot memory] in
// train/checkpoint_writer.h): ModelSnapshotCopy allocates its model once, on the host backend it
// is given, and every fill after that copies the replica's current weights into the same memory
// without allocating; CheckpointMemory's moments live on the host backend of the device it is
// made for. That the writer's thread is never given memory a later checkpoint refills is
// DrafterCheckpoints.AWriteInFlightKeepsItsMemory in checkpoint_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "backend/backend_factory.h"
#include "core/error.h"
#include "support/tiny_models.h"
#include "train/checkpoint_writer.h"
#include "train/model_snapshot.h"

namespace dflash {
namespace {

// Counts what a host backend takes from its memory source.
struct CountingSource {
    int allocations = 0;
    HostMemorySource source() {
        return [this](size_t n) {
            ++allocations;
            void* p = std::aligned_alloc(256, n);
            return Buffer(p, n, DeviceRef{}, [](void* q) { std::free(q); });
        };
    }
};

bool same_bits(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST(ModelSnapshotCopy, AllocatesOnceAndRefillsTheSameMemory) {
    auto be = make_cpu_backend(1);
    TargetModel replica = TargetModel::random(*be, test::tiny_target_config(), 1);
    replica.params().enable_training();
    CountingSource src;
    auto host = make_cpu_backend(1, src.source());
    train::ModelSnapshotCopy<TargetModel> snap;
    EXPECT_FALSE(snap.reserved());
    EXPECT_THROW(snap.fill(replica), Error);  // nothing to fill yet

    snap.reserve(*host, replica);
    ASSERT_TRUE(snap.reserved());
    const int made = src.allocations;
    EXPECT_GT(made, 0);
    const int64_t live = host->memory_counters().live_bytes;
    EXPECT_GE(live, replica.params().numel() * 4);
    snap.reserve(*host, replica);  // a second reserve keeps the first copy
    EXPECT_EQ(src.allocations, made);

    const TargetModel& first = snap.fill(replica);
    const void* at = first.params().flat_master().data();
    EXPECT_TRUE(same_bits(first.params().flat_master(), replica.params().flat_master()));

    // New weights (as after more training steps): the next fill copies them into the same
    // memory, allocating nothing.
    replica.params().init_random(2);
    ASSERT_FALSE(same_bits(first.params().flat_master(), replica.params().flat_master()));
    const TargetModel& second = snap.fill(replica);
    EXPECT_EQ(&second, &first);
    EXPECT_EQ(second.params().flat_master().data(), at);
    EXPECT_TRUE(same_bits(second.params().flat_master(), replica.params().flat_master()));
    EXPECT_EQ(src.allocations, made);
    EXPECT_EQ(host->memory_counters().live_bytes, live);
    EXPECT_EQ(host->memory_counters().peak_bytes, live);
}

TEST(CheckpointMemory, MomentsLiveOnTheDevicesHostBackend) {
    auto be = make_cpu_backend(1);
    const train::CheckpointMemory mem(*be, 1001);
    ASSERT_NE(mem.host, nullptr);
    EXPECT_EQ(mem.host->name(), "cpu");
    for (const DeviceTensor* t : {&mem.m, &mem.v}) {
        EXPECT_EQ(t->numel(), 1001);
        EXPECT_EQ(t->dtype(), DType::f32);
        EXPECT_EQ(t->device().kind, DeviceKind::cpu);
    }
    EXPECT_NE(mem.m.view().data(), mem.v.view().data());
    // Counted on the host backend, not on the training device's.
    EXPECT_EQ(mem.host->memory_counters().live_bytes, 2 * 1001 * 4);
    EXPECT_EQ(be->memory_counters().live_bytes, 0);
}

}  // namespace
}  // namespace dflash

// Backend::memory_counters (backend/memory_counter.h) on the CPU backend: live bytes follow the
// allocate() buffers as they come and go, the peak keeps the most and reset_peak_memory brings it
// down to what is live, and a buffer freed after its backend is gone still counts itself out (the
// counter is shared with the buffers).
#include <gtest/gtest.h>

#include <memory>

#include "backend/backend_factory.h"

namespace dflash {
namespace {

TEST(MemoryCounters, TrackLiveAndPeakBytes) {
    auto be = make_cpu_backend(1);
    const MemoryCounters start = be->memory_counters();
    EXPECT_EQ(start.live_bytes, 0);
    {
        Buffer a = be->allocate(1000);
        Buffer b = be->allocate(24);
        EXPECT_EQ(be->memory_counters().live_bytes, 1024);
        EXPECT_EQ(be->memory_counters().peak_bytes, 1024);
        a.reset();
        EXPECT_EQ(be->memory_counters().live_bytes, 24);
        EXPECT_EQ(be->memory_counters().peak_bytes, 1024);
        be->reset_peak_memory();
        EXPECT_EQ(be->memory_counters().peak_bytes, 24);
        Buffer c = be->allocate(100);
        EXPECT_EQ(be->memory_counters().peak_bytes, 124);
    }
    EXPECT_EQ(be->memory_counters().live_bytes, 0);
    EXPECT_EQ(be->memory_counters().peak_bytes, 124);
    // A tensor's storage counts as its bytes.
    const DeviceTensor t(*be, {10, 10}, DType::f32);
    EXPECT_EQ(be->memory_counters().live_bytes, 400);
}

TEST(MemoryCounters, ABufferMayOutliveItsBackend) {
    auto be = make_cpu_backend(1);
    Buffer b = be->allocate(64);
    be.reset();
    b.reset();  // frees the memory and counts it out of the (shared) counter without a crash
    SUCCEED();
}

}  // namespace
}  // namespace dflash

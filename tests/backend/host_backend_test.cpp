// make_cpu_backend over a host memory source (backend.h) and Backend::make_host_backend on the
// CPU: every allocation comes from the source (rounded up to 256 bytes), arrives zero-filled
// whatever the source held, is counted by the backend and goes back to the source when freed; a
// source that gives too little is an error. The CUDA side (pinned memory) is
// tests/cuda/host_backend_cuda_test.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>

#include "backend/backend_factory.h"
#include "core/error.h"

namespace dflash {
namespace {

// A source that hands out memory full of 0xAB and counts what it gives and gets back.
struct CountingSource {
    int allocations = 0;
    int frees = 0;
    size_t bytes = 0;
    size_t short_by = 0;  // > 0: gives that much less than asked

    HostMemorySource source() {
        return [this](size_t n) {
            ++allocations;
            bytes += n;
            void* p = std::aligned_alloc(256, n);
            std::memset(p, 0xAB, n);
            return Buffer(p, n - short_by, DeviceRef{}, [this](void* q) {
                ++frees;
                std::free(q);
            });
        };
    }
};

TEST(HostBackend, AllocationsComeFromTheSourceZeroFilledAndCounted) {
    CountingSource src;
    auto be = make_cpu_backend(1, src.source());
    EXPECT_EQ(be->name(), "cpu");
    {
        DeviceTensor t(*be, {100}, DType::f32);  // 400 bytes
        EXPECT_EQ(src.allocations, 1);
        EXPECT_EQ(src.bytes, 512u);
        for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.view().f32()[i], 0.0f) << i;
        EXPECT_EQ(be->memory_counters().live_bytes, 400);
        // It is host memory the backend's ops work on like any other.
        be->fill(t, 2.5f);
        EXPECT_EQ(t.view().f32()[99], 2.5f);
        Buffer h = be->allocate_host(10);
        EXPECT_EQ(src.allocations, 2);
    }
    EXPECT_EQ(src.frees, 2);
    EXPECT_EQ(be->memory_counters().live_bytes, 0);
    EXPECT_EQ(be->memory_counters().peak_bytes, 410);
}

TEST(HostBackend, ASourceThatGivesTooLittleIsAnError) {
    CountingSource src;
    src.short_by = 1;
    auto be = make_cpu_backend(1, src.source());
    EXPECT_THROW(be->allocate(300), Error);
    EXPECT_EQ(src.frees, 1);  // what it gave went back
}

TEST(HostBackend, OfACpuBackendIsAPlainCpuBackend) {
    auto be = make_cpu_backend(2);
    auto host = be->make_host_backend(1);
    EXPECT_EQ(host->name(), "cpu");
    DeviceTensor t(*host, {3}, DType::f32);
    EXPECT_EQ(t.view().f32()[2], 0.0f);
    // Its memory is its own: the CPU backend counts none of it.
    EXPECT_EQ(be->memory_counters().live_bytes, 0);
    EXPECT_EQ(host->memory_counters().live_bytes, 12);
}

}  // namespace
}  // namespace dflash

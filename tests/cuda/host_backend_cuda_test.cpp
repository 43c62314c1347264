// Backend::make_host_backend on CUDA (Note [Checkpoint snapshot memory] in
// train/checkpoint_writer.h): its memory is the backend's page-locked allocate_host memory,
// zero-filled; a checkpoint's moments (CheckpointMemory) and weights (ModelSnapshotCopy of a
// model on the device) downloaded into it carry the device's bits, the weights' copy refilled in
// place; and a 1 GiB download into it runs at the bus's speed (printed beside one into pageable
// memory, the way checkpoints were copied before). GPU tests skip visibly without a device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "backend/cuda/cuda_backend.h"
#include "cuda/elem_test_util.h"
#include "support/test_util.h"
#include "support/tiny_models.h"
#include "train/checkpoint_writer.h"
#include "train/model_snapshot.h"

namespace dflash {
namespace {

bool pinned(const void* p) {
    cudaPointerAttributes attr{};
    return cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeHost;
}

TEST(CudaHostBackend, MemoryIsPinnedAndZeroFilled) {
    REQUIRE_CUDA_DEVICE();
    auto be = cuda::make_cuda_backend(0);
    auto host = be->make_host_backend(1);
    EXPECT_EQ(host->name(), "cpu");
    // Pinned memory written and freed first, so that reused pages would show its bytes.
    {
        Buffer dirty = be->allocate_host(1 << 20);
        std::fill_n(static_cast<unsigned char*>(dirty.data()), 1 << 20, 0xAB);
    }
    DeviceTensor t(*host, {(1 << 18) + 3}, DType::f32);
    EXPECT_TRUE(pinned(t.view().data()));
    for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.view().f32()[i], 0.0f) << i;
    EXPECT_EQ(host->memory_counters().live_bytes, t.numel() * 4);
}

TEST(CudaHostBackend, CheckpointCopiesCarryTheDevicesBits) {
    REQUIRE_CUDA_DEVICE();
    auto be = cuda::make_cuda_backend(0);
    TargetModel replica = TargetModel::random(*be, test::gpu_target_config(64, 2), 3);
    replica.params().enable_training();
    const int64_t n = replica.params().numel();
    train::CheckpointMemory mem(*be, n);
    EXPECT_TRUE(pinned(mem.m.view().data()));
    EXPECT_TRUE(pinned(mem.v.view().data()));
    Rng rng(5);
    const HostTensor x = test::f32_values({n}, rng);
    const DeviceTensor d = test::to_gpu(*be, x, DType::f32);
    be->download(mem.m, d);
    EXPECT_EQ(test::bit_mismatch(mem.m.view(), x.view()), "");

    train::ModelSnapshotCopy<TargetModel> snap;
    snap.reserve(*mem.host, replica);
    const TargetModel& first = snap.fill(replica);
    EXPECT_TRUE(pinned(first.params().flat_master().data()));
    EXPECT_EQ(test::bit_mismatch(first.params().flat_master(),
                                 test::to_cpu(*be, replica.params().flat_master()).view()),
              "");
    // New device weights: refilled into the same pinned memory.
    const int64_t live = mem.host->memory_counters().live_bytes;
    const void* at = first.params().flat_master().data();
    be->upload(replica.params().flat_master(), x.view());
    const TargetModel& second = snap.fill(replica);
    EXPECT_EQ(second.params().flat_master().data(), at);
    EXPECT_EQ(test::bit_mismatch(second.params().flat_master(), x.view()), "");
    EXPECT_EQ(mem.host->memory_counters().live_bytes, live);
}

// Best of 3, GB/s.
double download_gbps(Backend& be, const Tensor& dst, const Tensor& src) {
    double best = 1e30;
    for (int k = 0; k < 3; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        be.download(dst, src);
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return static_cast<double>(src.nbytes()) / best * 1e-9;
}

TEST(CudaHostBackend, DownloadsIntoItRunAtTheBusSpeed) {
    REQUIRE_CUDA_DEVICE();
    auto be = cuda::make_cuda_backend(0);
    auto host = be->make_host_backend(1);
    const int64_t n = int64_t{1} << 28;  // 1 GiB of f32
    const DeviceTensor d(*be, {n}, DType::f32);
    const DeviceTensor into_pinned(*host, {n}, DType::f32);
    const HostTensor into_pageable({n});  // zero-filled: its pages are already in
    const double pinned_gbps = download_gbps(*be, into_pinned, d);
    const double pageable_gbps = download_gbps(*be, into_pageable, d);
    std::printf("1 GiB device-to-host: pinned %.1f GB/s, pageable %.1f GB/s\n", pinned_gbps,
                pageable_gbps);
    // PCIe 4 x16 moves ~25 GB/s pinned; the H200's PCIe 5 more. Below 10, the memory is not
    // pinned or the copy is not the one issued.
    EXPECT_GT(pinned_gbps, 10.0);
}

}  // namespace
}  // namespace dflash

// The CUDA backend as a whole: driven from 8 fresh std::threads in turn (each uses it, then
// release_thread), a second thread using a held backend gets an error naming both threads, upload /
// download / copy / fill round trips of every dtype, allocate() returns zeroed memory even where
// freed memory held other bytes, and an op whose temporaries exceed the op workspace fails with a
// message naming the request and the setting to raise (and leaves the backend usable).
// Also the device check every op shares (checks.cpp). GPU tests skip visibly without a device.
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "cuda/elem_test_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

// Runs fn on a fresh thread; returns the message of what it threw ("" when nothing).
std::string on_fresh_thread(const std::function<void()>& fn) {
    std::string error;
    std::thread worker([&] {
        try {
            fn();
        } catch (const std::exception& e) {
            error = e.what();
            if (error.empty()) error = "(exception without a message)";
        }
    });
    worker.join();
    return error;
}

// docs/design.md "Memory and threads": any thread may drive a device, one at a time. Each fresh
// thread has no CUDA state of its own (no current device); the backend must make its device current
// there.
TEST(CudaBackend, DrivenFromEightFreshThreadsInTurn) {
    REQUIRE_CUDA_DEVICE();
    const int index = cuda_device_count() - 1;  // not device 0 where there are several
    auto be = cuda::make_cuda_backend(index);
    const int64_t n = 4099;
    Rng rng(1);
    HostTensor x = test::f32_values({n}, rng);
    DeviceTensor y(*be, {n}, DType::f32);
    DeviceTensor dx = test::to_gpu(*be, x, DType::f32);
    std::vector<float> expect(n, 0.0f);
    cuda::release_thread(*be);
    for (int t = 0; t < 8; ++t) {
        const float alpha = static_cast<float>(t + 1);
        const std::string error = on_fresh_thread([&] {
            be->add_inplace(y, dx, alpha);
            be->synchronize();
            cuda::release_thread(*be);
        });
        ASSERT_EQ(error, "") << "thread " << t;
        for (int64_t i = 0; i < n; ++i) {
            const float term = alpha * x.f32()[i];  // rounded, then added (as the kernel does)
            expect[i] = expect[i] + term;
        }
    }
    HostTensor got = test::to_cpu(*be, y);  // the main thread takes it back
    EXPECT_EQ(test::bit_mismatch(got, HostTensor::from_f32({n}, expect)), "");
}

TEST(CudaBackend, ASecondThreadUsingAHeldBackendGetsAClearError) {
    REQUIRE_CUDA_DEVICE();
    auto be = make_backend(DeviceKind::cuda, 0, 1);
    DeviceTensor t(*be, {16}, DType::f32);  // this thread now holds the backend
    const std::string error = on_fresh_thread([&] { be->fill(t, 1.0f); });
    EXPECT_TRUE(test::has(error, "cuda:0 is held by thread")) << error;
    EXPECT_TRUE(test::has(error, "one thread at a time")) << error;
    // The owner is undisturbed.
    be->fill(t, 2.0f);
    EXPECT_EQ(test::to_cpu(*be, t).f32()[15], 2.0f);
    // Once released, another thread may drive it.
    cuda::release_thread(*be);
    EXPECT_EQ(on_fresh_thread([&] {
                  be->fill(t, 3.0f);
                  be->synchronize();
                  cuda::release_thread(*be);
              }),
              "");
    EXPECT_EQ(test::to_cpu(*be, t).f32()[0], 3.0f);
}

TEST(CudaBackend, UploadDownloadCopyAndFillRoundTrip) {
    REQUIRE_CUDA_DEVICE();
    auto be = make_backend(DeviceKind::cuda, 0, 1);
    EXPECT_EQ(be->name(), "cuda:0");
    EXPECT_EQ(be->compute_dtype(), DType::bf16);
    Rng rng(2);
    const int64_t n = 100003;
    HostTensor f = test::f32_values({n}, rng);
    HostTensor h({n}, DType::bf16);
    HostTensor i({n}, DType::i32);
    for (int64_t k = 0; k < n; ++k) {
        h.view().bf16()[k] = static_cast<uint16_t>(rng.next_u64());
        i.i32()[k] = static_cast<int32_t>(rng.next_u64());
    }
    for (const HostTensor* src : {&f, &h, &i}) {
        DeviceTensor d(*be, {n}, src->dtype());
        be->upload(d, *src);
        HostTensor back({n}, src->dtype());
        be->download(back, d);
        EXPECT_EQ(test::bit_mismatch(back, *src), "") << dtype_name(src->dtype());
    }
    // f32 -> bf16 -> f32 gives the bf16-rounded values; work queued after an upload sees it.
    DeviceTensor df(*be, {n}, DType::f32), dh(*be, {n}, DType::bf16), df2(*be, {n}, DType::f32);
    be->upload(df, f);
    be->copy(dh, df);
    be->copy(df2, dh);
    EXPECT_EQ(test::bit_mismatch(test::to_cpu(*be, df2), test::clone_rounded_bf16(f)), "");
    be->fill(dh, 0.5f);
    be->copy(df2, dh);
    HostTensor halves = test::to_cpu(*be, df2);
    EXPECT_EQ(halves.f32()[0], 0.5f);
    EXPECT_EQ(halves.f32()[n - 1], 0.5f);
    // Transfers check dtype and size.
    EXPECT_TRUE(test::has(test::error_of([&] { be->upload(dh, f); }), "same dtype"));
}

TEST(CudaBackend, AllocateReturnsZeroedMemory) {
    REQUIRE_CUDA_DEVICE();
    auto be = make_backend(DeviceKind::cuda, 0, 1);
    const int64_t n = 500001;  // 1000002 bytes as bf16
    for (int round = 0; round < 3; ++round) {
        Buffer b = be->allocate(static_cast<size_t>(n) * 2);
        const Tensor t(b.data(), DType::bf16, {n}, be->device());
        HostTensor got({n}, DType::bf16);
        be->download(got, t);
        int64_t nonzero = 0;
        for (int64_t k = 0; k < n; ++k) nonzero += got.view().bf16()[k] != 0;
        EXPECT_EQ(nonzero, 0) << "round " << round;
        be->fill(t, -1.0f);  // leave garbage behind for the next allocation to overwrite
        be->synchronize();
    }
    EXPECT_NO_THROW(be->allocate(0));
}

TEST(CudaBackend, OpWorkspaceExhaustionIsAClearError) {
    REQUIRE_CUDA_DEVICE();
    cuda::CudaBackendOptions opt;
    opt.op_workspace_bytes = 4096;
    auto be = cuda::make_cuda_backend(0, opt);
    const int64_t s = 100000, d = 8;
    DeviceTensor ids(*be, {s}, DType::i32), dout(*be, {s, d}, DType::bf16),
        dtable(*be, {4, d}, DType::f32);
    const std::string error = test::error_of([&] { be->embedding_bwd(ids, dout, dtable); });
    EXPECT_TRUE(test::has(error, "op workspace exhausted")) << error;
    EXPECT_TRUE(test::has(error, "embedding_bwd sort buffers")) << error;
    EXPECT_TRUE(test::has(error, "CudaBackendOptions::op_workspace_bytes")) << error;
    // The failed op gave its temporaries back: a small op that needs the workspace still runs.
    DeviceTensor x = test::to_gpu(*be, HostTensor::from_f32({3}, {1.0f, 2.0f, 2.0f}), DType::f32);
    DeviceTensor out(*be, {1}, DType::f32);
    be->sum_squares(x, out);
    EXPECT_EQ(test::to_cpu(*be, out).f32()[0], 9.0f);
}

TEST(CudaBackend, OpsRejectTensorsOfAnotherDevice) {
    REQUIRE_CUDA_DEVICE();
    auto be = make_backend(DeviceKind::cuda, 0, 1);
    HostTensor host({4});
    DeviceTensor dev(*be, {4}, DType::f32);
    const std::string error = test::error_of([&] { be->add_inplace(dev, host, 1.0f); });
    EXPECT_TRUE(test::has(error, "add_inplace: x is f32[4]@cpu")) << error;
    EXPECT_TRUE(test::has(error, "expected a tensor on cuda:0")) << error;
}

}  // namespace
}  // namespace dflash

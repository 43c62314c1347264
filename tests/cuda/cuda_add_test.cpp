// Minimal CUDA backend: DF_CUDA_CHECK messages, device_count without a GPU, add_inplace against the
// CPU (bit-exact: both use fused multiply-add) on awkward sizes, and one device driven from 8 fresh
// std::threads in turn, one at a time. GPU tests skip visibly when no device is present.
#include <cuda_runtime_api.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "backend/cuda/kernels/elementwise.h"
#include "core/error.h"
#include "core/rng.h"
#include "support/test_util.h"

namespace dflash::cuda {
namespace {

#define REQUIRE_CUDA_DEVICE()                 \
    do {                                      \
        if (device_count() == 0) {            \
            GTEST_SKIP() << "no CUDA device"; \
        }                                     \
    } while (0)

TEST(CudaCheck, NamesStatementErrorAndLocation) {
    try {
        DF_CUDA_CHECK(cudaErrorInvalidValue);
        FAIL() << "DF_CUDA_CHECK did not throw";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
        EXPECT_NE(msg.find("`cudaErrorInvalidValue`"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cuda_add_test.cpp:"), std::string::npos) << msg;
        EXPECT_NE(msg.find(" on "), std::string::npos) << msg;  // the device (or its absence)
    }
    EXPECT_NO_THROW(DF_CUDA_CHECK(cudaSuccess));
}

TEST(CudaDeviceCount, NeverThrows) {
    int n = -1;
    EXPECT_NO_THROW(n = device_count());
    EXPECT_GE(n, 0);
    // Asking again gives the same answer and leaves no sticky error behind.
    EXPECT_EQ(device_count(), n);
    if (n == 0) {
        EXPECT_THROW(CudaDevice(0), Error);
    }
}

std::vector<float> random_vector(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = rng.normal();
    return v;
}

TEST(CudaAdd, MatchesCpuOnAwkwardSizes) {
    REQUIRE_CUDA_DEVICE();
    CudaDevice dev(0);
    CudaDevice::Guard hold(dev);
    for (int64_t n : {int64_t{1}, int64_t{127}, int64_t{1000003}}) {
        const float alpha = -0.37f;
        auto y = random_vector(static_cast<size_t>(n), 1);
        const auto x = random_vector(static_cast<size_t>(n), 2);
        DeviceBuffer dy(dev, n * sizeof(float)), dx(dev, n * sizeof(float));
        dy.upload(y.data(), n * sizeof(float));
        dx.upload(x.data(), n * sizeof(float));
        add_inplace(dev, dy.f32(), dx.f32(), n, alpha);
        dev.synchronize();
        std::vector<float> got(static_cast<size_t>(n));
        dy.download(got.data(), n * sizeof(float));
        for (int64_t i = 0; i < n; ++i)
            ASSERT_EQ(got[i], std::fma(alpha, x[i], y[i])) << "n=" << n << " i=" << i;
    }
    // n = 0 launches nothing and is not an error.
    EXPECT_NO_THROW(add_inplace(dev, nullptr, nullptr, 0, 1.0f));
    EXPECT_THROW(add_inplace(dev, nullptr, nullptr, -1, 1.0f), Error);
}

// Design §2: any thread may drive a device, one at a time. Each fresh thread has no CUDA state of
// its own (no current device); acquire() must make the device usable there.
TEST(CudaAdd, DrivenFromEightFreshThreadsInTurn) {
    REQUIRE_CUDA_DEVICE();
    constexpr int64_t kN = 4099;
    CudaDevice dev(device_count() - 1);  // not device 0: fresh threads default to device 0
    std::vector<float> expect(kN, 0.0f);
    const auto x = random_vector(kN, 3);
    std::unique_ptr<DeviceBuffer> dy, dx;
    {
        CudaDevice::Guard hold(dev);
        dy = std::make_unique<DeviceBuffer>(dev, kN * sizeof(float));
        dx = std::make_unique<DeviceBuffer>(dev, kN * sizeof(float));
        dy->upload(expect.data(), kN * sizeof(float));
        dx->upload(x.data(), kN * sizeof(float));
    }
    for (int t = 0; t < 8; ++t) {
        std::string error;
        std::thread worker([&] {
            try {
                CudaDevice::Guard hold(dev);
                add_inplace(dev, dy->f32(), dx->f32(), kN, static_cast<float>(t + 1));
                dev.synchronize();
            } catch (const std::exception& e) {
                error = e.what();
            }
        });
        worker.join();
        ASSERT_EQ(error, "") << "thread " << t;
        for (int64_t i = 0; i < kN; ++i)
            expect[i] = std::fma(static_cast<float>(t + 1), x[i], expect[i]);
    }
    std::vector<float> got(kN);
    {
        CudaDevice::Guard hold(dev);
        dy->download(got.data(), kN * sizeof(float));
        dy.reset();
        dx.reset();
    }
    EXPECT_EQ(got, expect);
}

TEST(CudaDevice, RejectsASecondThreadWhileHeld) {
    REQUIRE_CUDA_DEVICE();
    CudaDevice dev(0);
    EXPECT_EQ(dev.name(), "cuda:0");
    EXPECT_FALSE(dev.held_by_this_thread());
    EXPECT_THROW(dev.synchronize(), Error);  // not held
    CudaDevice::Guard hold(dev);
    {
        CudaDevice::Guard again(dev);  // re-entrant on the owner
        EXPECT_TRUE(dev.held_by_this_thread());
    }
    EXPECT_TRUE(dev.held_by_this_thread());
    std::string error;
    std::thread other([&] {
        try {
            CudaDevice::Guard steal(dev);
        } catch (const Error& e) {
            error = e.what();
        }
    });
    other.join();
    EXPECT_NE(error.find("cuda:0 is held by thread"), std::string::npos) << error;
    // The failed attempt did not disturb the owner.
    EXPECT_TRUE(dev.held_by_this_thread());
    EXPECT_NO_THROW(dev.synchronize());
}

}  // namespace
}  // namespace dflash::cuda

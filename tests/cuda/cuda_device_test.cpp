// CudaDevice, DF_CUDA_CHECK and DF_CUBLAS_CHECK: DeviceErrors naming the statement, error and
// location; device_count without a GPU; one device held by one thread at a time (re-entrant for
// the owner, an error naming both threads for another). The backend driven from many threads is
// tests/cuda/cuda_backend_test.cpp. GPU tests skip visibly when no device is present.
#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <thread>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device.h"
#include "core/error.h"
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
    } catch (const DeviceError& e) {  // printed as a device error, neither bad input nor a bug
        EXPECT_EQ(e.kind(), ErrorKind::device);
        EXPECT_TRUE(e.where().starts_with("cuda_device_test.cpp:")) << e.where();
        const std::string msg = e.what();
        EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
        EXPECT_NE(msg.find("`cudaErrorInvalidValue`"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cuda_device_test.cpp:"), std::string::npos) << msg;
        EXPECT_NE(msg.find(" on "), std::string::npos) << msg;  // the device (or its absence)
    }
    EXPECT_NO_THROW(DF_CUDA_CHECK(cudaSuccess));
}

TEST(CudaCheck, CublasFailuresAreDeviceErrors) {
    try {
        DF_CUBLAS_CHECK(CUBLAS_STATUS_NOT_SUPPORTED);
        FAIL() << "DF_CUBLAS_CHECK did not throw";
    } catch (const DeviceError& e) {
        const std::string msg = e.what();
        EXPECT_TRUE(msg.starts_with("cuBLASLt error CUBLAS_STATUS_NOT_SUPPORTED")) << msg;
        EXPECT_NE(msg.find("`CUBLAS_STATUS_NOT_SUPPORTED`"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cuda_device_test.cpp:"), std::string::npos) << msg;
        EXPECT_NE(msg.find(" on "), std::string::npos) << msg;
    }
    EXPECT_NO_THROW(DF_CUBLAS_CHECK(CUBLAS_STATUS_SUCCESS));
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

// DeviceBuffer round trip on the device's stream.
TEST(CudaDevice, DeviceBufferRoundTrip) {
    REQUIRE_CUDA_DEVICE();
    CudaDevice dev(0);
    CudaDevice::Guard hold(dev);
    std::vector<float> x(4099);
    for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i) * 0.25f - 7.0f;
    DeviceBuffer buf(dev, x.size() * sizeof(float));
    buf.upload(x.data(), x.size() * sizeof(float));
    std::vector<float> got(x.size());
    buf.download(got.data(), got.size() * sizeof(float));
    EXPECT_EQ(got, x);
}

}  // namespace
}  // namespace dflash::cuda

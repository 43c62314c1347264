// Backend selection (backend/backend_factory.h): runtime.backend=auto falls back to the CPU
// without a GPU, cuda without one (or without a CUDA build) is an error that says what to do, and
// the factory makes the backend asked for.
#include <gtest/gtest.h>

#include "backend/backend_factory.h"
#include "support/test_util.h"

namespace dflash {
namespace {

TEST(BackendFactory, AutoAndCpuAndCuda) {
    EXPECT_EQ(resolve_backend("cpu", 8), DeviceKind::cpu);
    const int gpus = cuda_device_count();
    EXPECT_EQ(resolve_backend("auto"), gpus > 0 ? DeviceKind::cuda : DeviceKind::cpu);
    if (gpus == 0) {
        const std::string err = test::error_of([] { resolve_backend("cuda"); });
        EXPECT_TRUE(test::has(err, "runtime.backend=cuda")) << err;
        EXPECT_TRUE(test::has(
            err, cuda_backend_built() ? "no CUDA device is visible" : "built without CUDA"))
            << err;
    } else {
        EXPECT_EQ(resolve_backend("cuda", gpus), DeviceKind::cuda);
        EXPECT_TRUE(test::has(test::error_of([&] { resolve_backend("cuda", gpus + 1); }),
                              "lower runtime.devices"));
    }
    EXPECT_TRUE(test::has(test::error_of([] { resolve_backend("tpu"); }), "not one of"));
}

TEST(BackendFactory, MakesTheCpuBackend) {
    auto be = make_backend(DeviceKind::cpu, 0, 2);
    EXPECT_EQ(be->name(), "cpu");
    EXPECT_EQ(be->compute_dtype(), DType::f32);
    EXPECT_EQ(be->device().kind, DeviceKind::cpu);
}

}  // namespace
}  // namespace dflash

// The device-side sum of GPU workers (Backend::make_device_all_reduce; NCCL loaded at run time,
// src/backend/cuda/nccl_all_reduce.h). One worker thread per GPU, as the trainer runs them: every
// GPU ends with the same bits, equal to the host's rank-order sum for two ranks (one addition)
// and within float rounding for more; the sum captured in a recorded step replays with new
// inputs; one rank is the identity. Cases needing two GPUs say so and skip on one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend_factory.h"
#include "comm/in_process.h"
#include "comm/rank_threads.h"
#include "core/rng.h"

namespace dflash {
namespace {

constexpr const char* kNccl = "libnccl.so.2";  // found through LD_LIBRARY_PATH (test-gpu.sh)

std::vector<float> random_values(size_t n, uint64_t seed) {
    Rng rng(seed);
    std::vector<float> v(n);
    for (auto& x : v) x = (rng.uniform() - 0.5f) * 8.0f;
    return v;
}

// A macro, not a function: GTEST_SKIP must return from the test body itself.
#define SKIP_UNLESS_GPUS(n)        \
    if (cuda_device_count() < (n)) \
    GTEST_SKIP() << "needs " << (n) << " CUDA devices, found " << cuda_device_count()

// Each of `ranks` threads: a backend on GPU r, its values uploaded, `steps` calls of fn.
struct Rank {
    std::unique_ptr<Backend> be;
    std::unique_ptr<DeviceAllReduce> sum;
    DeviceTensor buf;
};

TEST(NcclAllReduce, EveryGpuGetsTheSameSumAsTheHost) {
    SKIP_UNLESS_GPUS(2);
    const int R = std::min(cuda_device_count(), 8);
    const size_t n = 1'000'003;
    std::vector<std::vector<float>> in, out(static_cast<size_t>(R), std::vector<float>(n));
    for (int r = 0; r < R; ++r) in.push_back(random_values(n, 10 + static_cast<uint64_t>(r)));
    InProcessGroup group(R);
    const auto errors = test::run_ranks(R, [&](int r) {
        auto be = make_backend(DeviceKind::cuda, r, 1);
        auto sum = be->make_device_all_reduce(group.rank(r), kNccl);
        ASSERT_NE(sum, nullptr);
        DeviceTensor buf(*be, {static_cast<int64_t>(n)}, DType::f32);
        const auto rr = static_cast<size_t>(r);
        be->upload(buf.view(), Tensor(in[rr].data(), DType::f32, {static_cast<int64_t>(n)}));
        sum->sum(buf.view());
        be->download(Tensor(out[rr].data(), DType::f32, {static_cast<int64_t>(n)}), buf.view());
        if (r == 0) std::printf("%s\n", sum->describe().c_str());
    });
    for (const auto& e : errors) ASSERT_EQ(e, "");
    double worst = 0;
    for (size_t i = 0; i < n; ++i) {
        float want = in[0][i];
        for (int r = 1; r < R; ++r) want += in[static_cast<size_t>(r)][i];
        if (R == 2) {
            ASSERT_EQ(out[0][i], want) << i;  // a + b: one rounding, either order
        }
        worst = std::max(worst, static_cast<double>(std::abs(out[0][i] - want)));
    }
    EXPECT_LT(worst, 1e-5 * R);
    for (int r = 1; r < R; ++r)
        EXPECT_EQ(std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), n * 4), 0)
            << "rank " << r;
}

TEST(NcclAllReduce, ASumRecordedInAStepReplaysWithNewInputs) {
    SKIP_UNLESS_GPUS(2);
    const int R = 2;
    const int64_t n = 4099;
    InProcessGroup group(R);
    const auto errors = test::run_ranks(R, [&](int r) {
        GraphOptions g;
        g.enabled = true;
        g.warmup_runs = 1;
        auto be = make_backend(DeviceKind::cuda, r, 1, g);
        auto sum = be->make_device_all_reduce(group.rank(r), kNccl);
        DeviceTensor buf(*be, {n}, DType::f32);
        StepOwner owner(*be);
        for (int step = 0; step < 5; ++step) {
            // Every rank holds (rank + 1) * (step + 1) at every element; the sum is 3 (step + 1).
            std::vector<float> v(static_cast<size_t>(n), static_cast<float>((r + 1) * (step + 1)));
            be->upload(buf.view(), Tensor(v.data(), DType::f32, {n}));
            be->run_step(StepKey{owner.id(), "sum", {}}, [&] { sum->sum(buf.view()); });
            be->download(Tensor(v.data(), DType::f32, {n}), buf.view());
            for (float x : v) ASSERT_EQ(x, static_cast<float>(3 * (step + 1))) << "step " << step;
        }
        const GraphStats s = be->graph_stats();
        EXPECT_EQ(s.captures, 1);
        EXPECT_GE(s.replays, 3);
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(NcclAllReduce, OneRankIsTheIdentity) {
    SKIP_UNLESS_GPUS(1);
    InProcessGroup group(1);
    auto be = make_backend(DeviceKind::cuda, 0, 1);
    auto sum = be->make_device_all_reduce(group.rank(0), kNccl);
    ASSERT_NE(sum, nullptr);
    const auto v = random_values(777, 3);
    DeviceTensor buf(*be, {777}, DType::f32);
    be->upload(buf.view(), Tensor(const_cast<float*>(v.data()), DType::f32, {777}));
    sum->sum(buf.view());
    std::vector<float> got(777);
    be->download(Tensor(got.data(), DType::f32, {777}), buf.view());
    EXPECT_EQ(got, v);
    EXPECT_NE(sum->describe().find("NCCL 2."), std::string::npos) << sum->describe();
}

TEST(NcclAllReduce, AMissingLibraryIsANamedError) {
    SKIP_UNLESS_GPUS(1);
    InProcessGroup group(1);
    auto be = make_backend(DeviceKind::cuda, 0, 1);
    try {
        be->make_device_all_reduce(group.rank(0), "/nonexistent/libnccl.so.2");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("runtime.nccl_library"), std::string::npos)
            << e.what();
    }
}

}  // namespace
}  // namespace dflash

// The device collectives of GPU workers (Backend::make_device_collectives; NCCL loaded at run
// time, src/backend/cuda/nccl_collectives.h). One worker thread per GPU, as the trainer runs
// them: every GPU ends with the same bits, equal to the host's rank-order sum for two ranks (one
// addition) and within float rounding for more; reduce-scatter and all-gather work in place on
// chunks; collectives recorded in a step replay with new inputs; one rank is the identity; a
// wait that would never end fails after runtime.collective_timeout_s, or at once on abort(), and
// leaves the device usable. Cases needing two GPUs say so and skip on one.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "comm/in_process.h"
#include "comm/rank_threads.h"
#include "core/rng.h"

namespace dflash {
namespace {

const CollectiveOptions kNccl{"libnccl.so.2", 600};  // found through LD_LIBRARY_PATH

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

Tensor host_view(std::vector<float>& v) {
    return Tensor(v.data(), DType::f32, {static_cast<int64_t>(v.size())});
}

TEST(NcclCollectives, EveryGpuGetsTheSameSumAsTheHost) {
    SKIP_UNLESS_GPUS(2);
    const int R = std::min(cuda_device_count(), 8);
    const size_t n = 1'000'003;
    std::vector<std::vector<float>> in, out(static_cast<size_t>(R), std::vector<float>(n));
    for (int r = 0; r < R; ++r) in.push_back(random_values(n, 10 + static_cast<uint64_t>(r)));
    InProcessGroup group(R);
    const auto errors = test::run_ranks(R, [&](int r) {
        auto be = make_backend(DeviceKind::cuda, r, 1);
        auto coll = be->make_device_collectives(group.rank(r), kNccl);
        ASSERT_NE(coll, nullptr);
        DeviceTensor buf(*be, {static_cast<int64_t>(n)}, DType::f32);
        const auto rr = static_cast<size_t>(r);
        be->upload(buf.view(), host_view(in[rr]));
        coll->sum(buf.view());
        be->download(host_view(out[rr]), buf.view());
        if (r == 0) std::printf("%s\n", coll->describe().c_str());
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

// Reduce-scatter then all-gather of the sums: every rank ends with the whole sum, as the sharded
// optimizer uses them (its chunks 64-element aligned; here an odd multiple).
TEST(NcclCollectives, ReduceScatterThenAllGatherGiveEveryRankTheSum) {
    SKIP_UNLESS_GPUS(2);
    const int R = std::min(cuda_device_count(), 8);
    const int64_t chunk = 64 * 1001, n = chunk * R;
    std::vector<std::vector<float>> in, scattered(static_cast<size_t>(R)),
        out(static_cast<size_t>(R), std::vector<float>(static_cast<size_t>(n)));
    for (int r = 0; r < R; ++r)
        in.push_back(random_values(static_cast<size_t>(n), 40 + static_cast<uint64_t>(r)));
    InProcessGroup group(R);
    const auto errors = test::run_ranks(R, [&](int r) {
        auto be = make_backend(DeviceKind::cuda, r, 1);
        auto coll = be->make_device_collectives(group.rank(r), kNccl);
        DeviceTensor buf(*be, {n}, DType::f32);
        const auto rr = static_cast<size_t>(r);
        be->upload(buf.view(), host_view(in[rr]));
        coll->reduce_scatter(buf.view(), chunk);
        scattered[rr].resize(static_cast<size_t>(chunk));
        be->download(host_view(scattered[rr]), buf.view().rows(r * chunk, (r + 1) * chunk));
        coll->all_gather(buf.view(), chunk);
        be->download(host_view(out[rr]), buf.view());
    });
    for (const auto& e : errors) ASSERT_EQ(e, "");
    for (int r = 0; r < R; ++r) {
        double worst = 0;
        for (int64_t i = 0; i < chunk; ++i) {
            float want = 0;
            for (int k = 0; k < R; ++k) want += in[static_cast<size_t>(k)][r * chunk + i];
            worst = std::max(
                worst, static_cast<double>(std::abs(scattered[static_cast<size_t>(r)][i] - want)));
            // The gathered chunk is exactly what its owner computed.
            ASSERT_EQ(out[0][r * chunk + i], scattered[static_cast<size_t>(r)][i]) << r << " " << i;
        }
        EXPECT_LT(worst, 1e-5 * R) << "chunk " << r;
    }
    for (int r = 1; r < R; ++r)
        EXPECT_EQ(std::memcmp(out[0].data(), out[static_cast<size_t>(r)].data(), n * 4), 0)
            << "rank " << r;
}

TEST(NcclCollectives, CollectivesRecordedInAStepReplayWithNewInputs) {
    SKIP_UNLESS_GPUS(2);
    const int R = 2;
    const int64_t chunk = 64 * 33, n = chunk * R;
    InProcessGroup group(R);
    const auto errors = test::run_ranks(R, [&](int r) {
        GraphOptions g;
        g.enabled = true;
        g.warmup_runs = 1;
        auto be = make_backend(DeviceKind::cuda, r, 1, g);
        auto coll = be->make_device_collectives(group.rank(r), kNccl);
        DeviceTensor buf(*be, {n}, DType::f32), whole(*be, {n + 5}, DType::f32);
        StepOwner owner(*be);
        for (int step = 0; step < 5; ++step) {
            // Every rank holds (rank + 1) * (step + 1) at every element; the sum is 3 (step + 1).
            std::vector<float> v(static_cast<size_t>(n), static_cast<float>((r + 1) * (step + 1)));
            std::vector<float> w(static_cast<size_t>(n + 5), static_cast<float>(r + step));
            be->upload(buf.view(), host_view(v));
            be->upload(whole.view(), host_view(w));
            be->run_step(StepKey{owner.id(), "collectives", {}}, [&] {
                coll->reduce_scatter(buf.view(), chunk);
                coll->all_gather(buf.view(), chunk);
                coll->sum(whole.view());
            });
            be->download(host_view(v), buf.view());
            be->download(host_view(w), whole.view());
            for (float x : v) ASSERT_EQ(x, static_cast<float>(3 * (step + 1))) << "step " << step;
            for (float x : w) ASSERT_EQ(x, static_cast<float>(1 + 2 * step)) << "step " << step;
        }
        const GraphStats s = be->graph_stats();
        EXPECT_EQ(s.captures, 1);
        EXPECT_GE(s.replays, 3);
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
}

TEST(NcclCollectives, OneRankIsTheIdentityEagerAndRecorded) {
    SKIP_UNLESS_GPUS(1);
    InProcessGroup group(1);
    GraphOptions g;
    g.enabled = true;
    g.warmup_runs = 1;
    auto be = make_backend(DeviceKind::cuda, 0, 1, g);
    auto coll = be->make_device_collectives(group.rank(0), kNccl);
    ASSERT_NE(coll, nullptr);
    EXPECT_NE(coll->describe().find("NCCL 2."), std::string::npos) << coll->describe();
    StepOwner owner(*be);
    DeviceTensor buf(*be, {64 * 13}, DType::f32);
    for (int step = 0; step < 4; ++step) {
        auto v = random_values(64 * 13, 3 + static_cast<uint64_t>(step));
        const auto want = v;
        be->upload(buf.view(), host_view(v));
        be->run_step(StepKey{owner.id(), "one", {}}, [&] {
            coll->sum(buf.view());
            coll->reduce_scatter(buf.view(), 64 * 13);
            coll->all_gather(buf.view(), 64 * 13);
        });
        be->download(host_view(v), buf.view());
        EXPECT_EQ(v, want) << "step " << step;
    }
    EXPECT_EQ(be->graph_stats().captures, 1);
}

TEST(NcclCollectives, AMissingLibraryIsANamedError) {
    SKIP_UNLESS_GPUS(1);
    InProcessGroup group(1);
    auto be = make_backend(DeviceKind::cuda, 0, 1);
    try {
        be->make_device_collectives(group.rank(0), {"/nonexistent/libnccl.so.2", 600});
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("runtime.nccl_library"), std::string::npos)
            << e.what();
    }
}

// A host function on the backend's stream that returns only once `release` is set (or after 20 s,
// so a broken test cannot hang the suite): device work that never finishes, as a collective whose
// peer is gone.
void CUDART_CB block_until_released(void* flag) {
    auto* release = static_cast<std::atomic<bool>*>(flag);
    const auto t0 = std::chrono::steady_clock::now();
    while (!release->load() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// Queues the blocker, runs `wait`, and returns its error and how long it took.
std::pair<std::string, double> blocked_wait(Backend& be, std::atomic<bool>& release,
                                            const std::function<void()>& wait) {
    EXPECT_EQ(cudaLaunchHostFunc(cuda::stream_of(be), block_until_released, &release), cudaSuccess);
    const auto t0 = std::chrono::steady_clock::now();
    std::string error;
    try {
        wait();
    } catch (const Error& e) {
        error = e.what();
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    release.store(true);
    return {error, s};
}

TEST(NcclCollectives, AWaitPastTheTimeoutFailsNamingTheSetting) {
    SKIP_UNLESS_GPUS(1);
    InProcessGroup group(1);
    auto be = make_backend(DeviceKind::cuda, 0, 1);
    std::atomic<bool> release{false};
    {
        auto coll = be->make_device_collectives(group.rank(0), {"libnccl.so.2", 0.5});
        DeviceTensor buf(*be, {64}, DType::f32);
        std::vector<float> host(64);
        const auto [error, seconds] =
            blocked_wait(*be, release, [&] { be->download(host_view(host), buf.view()); });
        EXPECT_NE(error.find("runtime.collective_timeout_s"), std::string::npos) << error;
        EXPECT_GE(seconds, 0.45);
        EXPECT_LT(seconds, 5.0);
        // Once the collectives are aborted they refuse further work instead of hanging.
        EXPECT_THROW(coll->sum(buf.view()), Error);
    }
    // The device stays usable: its stream drains and takes new work.
    be->synchronize();
    DeviceTensor t(*be, {3}, DType::f32);
    be->fill(t.view(), 2.5f);
    std::vector<float> got(3);
    be->download(host_view(got), t.view());
    EXPECT_EQ(got, std::vector<float>(3, 2.5f));
}

TEST(NcclCollectives, AbortFromAnotherThreadEndsTheWaitWithItsReason) {
    SKIP_UNLESS_GPUS(1);
    InProcessGroup group(1);
    auto be = make_backend(DeviceKind::cuda, 0, 1);
    auto coll = be->make_device_collectives(group.rank(0), kNccl);  // a 600 s timeout
    std::atomic<bool> release{false};
    std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        coll->abort("worker 1 failed: out of memory");
    });
    const auto [error, seconds] = blocked_wait(*be, release, [&] { be->synchronize(); });
    aborter.join();
    EXPECT_NE(error.find("worker 1 failed: out of memory"), std::string::npos) << error;
    EXPECT_LT(seconds, 5.0);
    coll.reset();
    be->synchronize();
}

}  // namespace
}  // namespace dflash

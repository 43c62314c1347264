// TcpGroup (src/comm/tcp_group.h): the processes of a run are played by threads here, each with its
// own group and sockets on localhost. Sums come out in rank order on every rank (also across the
// 4 MiB chunking); broadcasts from any root; a mismatched collective, a dead peer, a silent peer,
// a missing process and differing settings are each an error that names the cause on every rank,
// within the deadline, never a hang; abort() wakes a blocked collective.
#include "comm/tcp_group.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <thread>

#include "comm/rank_threads.h"
#include "core/error.h"
#include "core/rng.h"
#include "support/test_util.h"

namespace dflash {
namespace {

TcpGroupOptions options(int rank, int world, int port, double timeout_s = 20) {
    TcpGroupOptions o;
    o.rank = rank;
    o.world = world;
    o.master_addr = "127.0.0.1";
    o.master_port = port;
    o.timeout_s = timeout_s;
    o.agreement = "train.lr = 0.001\n";
    return o;
}

// Runs fn(rank, group) on `world` threads, each with its own TcpGroup; returns each rank's error.
std::vector<std::string> run_processes(int world, const std::function<void(int, TcpGroup&)>& fn,
                                       double timeout_s = 20) {
    TcpListener listener("127.0.0.1", 0);
    return test::run_ranks(world, [&](int r) {
        TcpGroup g(options(r, world, listener.port(), timeout_s), r == 0 ? &listener : nullptr);
        fn(r, g);
    });
}

TEST(TcpGroup, SumsInRankOrderOnEveryRankAcrossChunks) {
    const int W = 3;
    // 1.5M floats: 6 MB, more than one 4 MiB chunk. Values of mixed magnitude, so that another
    // order of additions gives other bits.
    const size_t n = 1'500'000;
    std::vector<std::vector<float>> in(W, std::vector<float>(n));
    for (int r = 0; r < W; ++r) {
        Rng rng(100 + static_cast<uint64_t>(r));
        for (auto& x : in[static_cast<size_t>(r)])
            x = rng.uniform() * std::pow(10.0f, static_cast<float>(r * 3 - 3));
    }
    std::vector<float> want(n);
    for (size_t i = 0; i < n; ++i) want[i] = (in[0][i] + in[1][i]) + in[2][i];
    std::vector<std::vector<float>> got = in;
    std::vector<std::vector<double>> got64(W, std::vector<double>{1e16, 1.0, -1e16});
    got64[1] = {1.0, 1e16, 0.5};
    got64[2] = {-1e16, -1e16, 0.25};
    const auto errors = run_processes(W, [&](int r, TcpGroup& g) {
        g.all_reduce_sum(got[static_cast<size_t>(r)].data(), n);
        g.all_reduce_sum(got64[static_cast<size_t>(r)].data(), 3);
    });
    for (int r = 0; r < W; ++r) {
        EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
        EXPECT_EQ(std::memcmp(got[static_cast<size_t>(r)].data(), want.data(), n * sizeof(float)),
                  0)
            << "rank " << r;
        // ((1e16 + 1) - 1e16) = 0 in rank order, not 1.
        EXPECT_EQ(got64[static_cast<size_t>(r)], (std::vector<double>{0.0, 0.0, -1e16 + 0.75}))
            << "rank " << r;
    }
    // Not the same as another order: the check above can fail.
    size_t differs = 0;
    for (size_t i = 0; i < n; ++i) differs += (in[2][i] + in[1][i]) + in[0][i] != want[i] ? 1 : 0;
    EXPECT_GT(differs, 0u);
}

TEST(TcpGroup, BroadcastsFromAnyRootAndBarriers) {
    const int W = 4;
    for (int root = 0; root < W; ++root) {
        std::vector<std::vector<int>> buf(W, std::vector<int>(1000, -1));
        for (int i = 0; i < 1000; ++i) buf[static_cast<size_t>(root)][static_cast<size_t>(i)] = i;
        const auto errors = run_processes(W, [&](int r, TcpGroup& g) {
            g.barrier();
            g.broadcast(buf[static_cast<size_t>(r)].data(), 1000 * sizeof(int), root);
            g.barrier();
        });
        for (int r = 0; r < W; ++r) {
            EXPECT_EQ(errors[static_cast<size_t>(r)], "");
            EXPECT_EQ(buf[static_cast<size_t>(r)], buf[static_cast<size_t>(root)])
                << "root " << root << " rank " << r;
            EXPECT_EQ(buf[static_cast<size_t>(r)][999], 999);
        }
    }
}

TEST(TcpGroup, AMismatchedCollectiveIsNamedOnEveryRank) {
    const auto errors = run_processes(3, [](int r, TcpGroup& g) {
        float x = 1;
        if (r == 2)
            g.barrier();
        else
            g.all_reduce_sum(&x, 1);
    });
    for (const auto& e : errors) {
        EXPECT_TRUE(test::has(e, "collective mismatch between processes")) << e;
        EXPECT_TRUE(test::has(e, "process 2 called barrier()")) << e;
    }
}

TEST(TcpGroup, ADeadPeerIsAnErrorNotAHang) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = run_processes(3, [](int r, TcpGroup& g) {
        if (r == 1) return;  // its group closes its socket: the process "died"
        float x = 1;
        g.all_reduce_sum(&x, 1);
    });
    EXPECT_EQ(errors[1], "");
    EXPECT_TRUE(test::has(errors[0], "lost its connection to process 1")) << errors[0];
    // Rank 2 learns it from process 0 (whose group is gone once it failed).
    EXPECT_TRUE(test::has(errors[2], "lost its connection to process 0")) << errors[2];
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
}

TEST(TcpGroup, ASilentPeerTimesOutNamingIt) {
    const auto errors = run_processes(
        2,
        [](int r, TcpGroup& g) {
            if (r == 1) {  // alive but never calls the collective
                std::this_thread::sleep_for(std::chrono::milliseconds(1500));
                return;
            }
            float x = 1;
            g.all_reduce_sum(&x, 1);
        },
        0.5);
    EXPECT_TRUE(test::has(errors[0], "waited 0.5 s for process 1")) << errors[0];
    EXPECT_TRUE(test::has(errors[0], "launch.timeout_s")) << errors[0];
}

TEST(TcpGroup, AMissingProcessIsNamedAtStartUp) {
    TcpListener listener("127.0.0.1", 0);
    const auto errors = test::run_ranks(2, [&](int r) {
        // World 3, but process 2 is never started.
        TcpGroup g(options(r, 3, listener.port(), 0.5), r == 0 ? &listener : nullptr);
    });
    EXPECT_TRUE(test::has(errors[0], "waited 0.5 s for 1 of the 2 other processes (missing: 2)"))
        << errors[0];
    EXPECT_FALSE(errors[1].empty());
}

TEST(TcpGroup, DifferentSettingsAreRefusedNamingTheLine) {
    TcpListener listener("127.0.0.1", 0);
    const auto errors = test::run_ranks(2, [&](int r) {
        TcpGroupOptions o = options(r, 2, listener.port());
        if (r == 1) o.agreement = "train.lr = 0.002\n";
        TcpGroup g(o, r == 0 ? &listener : nullptr);
    });
    for (const auto& e : errors) {
        EXPECT_TRUE(test::has(e, "process 1 runs with other settings than process 0")) << e;
        EXPECT_TRUE(test::has(e, "process 0 has `train.lr = 0.001`, it has `train.lr = 0.002`"))
            << e;
    }
}

TEST(TcpGroup, NoProcessZeroIsNamedAfterTheDeadline) {
    // A port nobody listens on (it was free a moment ago).
    const int closed_port = [&] {
        TcpListener l("127.0.0.1", 0);
        return l.port();
    }();
    const std::string e = test::error_of([&] { TcpGroup g(options(1, 2, closed_port, 0.5)); });
    EXPECT_TRUE(test::has(e, "could not reach process 0 at 127.0.0.1")) << e;
    EXPECT_TRUE(test::has(e, "MASTER_PORT")) << e;
}

TEST(TcpGroup, AbortWakesABlockedCollective) {
    TcpListener listener("127.0.0.1", 0);
    std::unique_ptr<TcpGroup> groups[2];
    std::vector<std::string> errors = test::run_ranks(2, [&](int r) {
        groups[r] = std::make_unique<TcpGroup>(options(r, 2, listener.port()),
                                               r == 0 ? &listener : nullptr);
    });
    ASSERT_EQ(errors, (std::vector<std::string>{"", ""}));
    const auto t0 = std::chrono::steady_clock::now();
    std::thread aborter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        groups[0]->abort("worker 0 (cpu:0) failed during step 3: out of memory");
    });
    const std::string e = test::error_of([&] {
        float x = 1;
        groups[0]->all_reduce_sum(&x, 1);  // rank 1 never joins: blocked until the abort
    });
    aborter.join();
    EXPECT_TRUE(test::has(e, "aborted on process 0 of 2: worker 0 (cpu:0) failed")) << e;
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
    // The peer, blocked now, learns of it through the closed connection.
    const std::string e1 = test::error_of([&] { groups[1]->barrier(); });
    EXPECT_TRUE(test::has(e1, "lost its connection to process 0")) << e1;
}

}  // namespace
}  // namespace dflash

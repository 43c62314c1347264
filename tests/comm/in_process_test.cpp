// InProcessGroup collectives: sums on awkward sizes, bitwise determinism under random thread
// timing, broadcast, barrier, abort waking blocked ranks, and mismatched calls failing loudly.
#include "comm/in_process.h"

#include <atomic>
#include <cstring>
#include <thread>

#include "comm/rank_threads.h"
#include "core/error.h"
#include "core/rng.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::run_ranks;

// A value whose low bits make the summation order visible.
template <typename T>
T contribution(int rank, size_t i) {
    return static_cast<T>(1.0 + 0.1 * rank) * static_cast<T>(i % 97) + static_cast<T>(rank);
}

template <typename T>
void check_sums(int ranks, size_t n) {
    InProcessGroup group(ranks);
    std::vector<std::vector<T>> bufs(static_cast<size_t>(ranks), std::vector<T>(n));
    for (int r = 0; r < ranks; ++r)
        for (size_t i = 0; i < n; ++i) bufs[r][i] = contribution<T>(r, i);
    const auto errors = run_ranks(
        ranks, [&](int r) { group.rank(r).all_reduce_sum(n ? bufs[r].data() : nullptr, n); });
    for (int r = 0; r < ranks; ++r) ASSERT_EQ(errors[r], "") << "rank " << r;
    for (size_t i = 0; i < n; ++i) {
        T expect = contribution<T>(0, i);  // rank order 0..N-1, exactly as documented
        for (int r = 1; r < ranks; ++r) expect += contribution<T>(r, i);
        for (int r = 0; r < ranks; ++r)
            ASSERT_EQ(bufs[r][i], expect) << "ranks=" << ranks << " n=" << n << " i=" << i;
    }
}

TEST(InProcess, SumsOnAwkwardSizes) {
    for (int ranks : {1, 2, 3, 5, 8})
        for (size_t n : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{13}, size_t{1009}}) {
            check_sums<float>(ranks, n);
            check_sums<double>(ranks, n);
        }
}

TEST(InProcess, RankAndSize) {
    InProcessGroup group(3);
    EXPECT_EQ(group.size(), 3);
    EXPECT_EQ(group.rank(2).rank(), 2);
    EXPECT_EQ(group.rank(2).size(), 3);
    EXPECT_THROW(group.rank(3), Error);
    EXPECT_THROW(InProcessGroup(0), Error);
}

// Values spanning many magnitudes make float addition visibly order-dependent, so any change of
// order caused by timing would change the bits.
TEST(InProcess, SumIsBitwiseDeterministicUnderRandomTiming) {
    constexpr int kRanks = 7;
    constexpr size_t kN = 10007;
    Rng data_rng(42);
    std::vector<std::vector<float>> inputs(kRanks, std::vector<float>(kN));
    for (auto& v : inputs)
        for (auto& x : v)
            x = data_rng.normal() * std::ldexp(1.0f, static_cast<int>(data_rng.below(40)) - 20);

    std::vector<float> ordered = inputs[0], reversed = inputs[kRanks - 1];
    for (int r = 1; r < kRanks; ++r)
        for (size_t i = 0; i < kN; ++i) ordered[i] += inputs[r][i];
    for (int r = kRanks - 2; r >= 0; --r)
        for (size_t i = 0; i < kN; ++i) reversed[i] += inputs[r][i];
    // The test can only catch order changes if order matters for this data.
    ASSERT_NE(std::memcmp(ordered.data(), reversed.data(), kN * sizeof(float)), 0);

    for (int run = 0; run < 25; ++run) {
        InProcessGroup group(kRanks);
        auto bufs = inputs;
        const auto errors = run_ranks(kRanks, [&](int r) {
            Rng delay = Rng(1000 + run).fork(r);
            for (int rep = 0; rep < 2; ++rep) {
                std::this_thread::sleep_for(std::chrono::microseconds(delay.below(2000)));
                if (rep == 0) group.rank(r).barrier();
            }
            group.rank(r).all_reduce_sum(bufs[r].data(), kN);
        });
        for (int r = 0; r < kRanks; ++r) {
            ASSERT_EQ(errors[r], "");
            ASSERT_EQ(std::memcmp(bufs[r].data(), ordered.data(), kN * sizeof(float)), 0)
                << "run " << run << " rank " << r << " differs from the rank-order sum";
        }
    }
}

TEST(InProcess, BroadcastCopiesRootBuffer) {
    constexpr int kRanks = 4;
    for (size_t bytes : {size_t{0}, size_t{1}, size_t{3}, size_t{4099}}) {
        for (int root : {0, 2}) {
            InProcessGroup group(kRanks);
            std::vector<std::vector<unsigned char>> bufs(kRanks);
            for (int r = 0; r < kRanks; ++r)
                for (size_t i = 0; i < bytes; ++i)
                    bufs[r].push_back(static_cast<unsigned char>(r * 31 + i * 7));
            const auto root_copy = bufs[root];
            const auto errors = run_ranks(kRanks, [&](int r) {
                group.rank(r).broadcast(bytes ? bufs[r].data() : nullptr, bytes, root);
            });
            for (int r = 0; r < kRanks; ++r) {
                ASSERT_EQ(errors[r], "");
                EXPECT_EQ(bufs[r], root_copy) << "rank " << r << " bytes " << bytes;
            }
        }
    }
}

TEST(InProcess, BarrierHoldsEveryRankUntilAllArrive) {
    constexpr int kRanks = 6;
    constexpr int kRounds = 200;
    InProcessGroup group(kRanks);
    std::atomic<int> arrived{0};
    std::atomic<int> early{0};
    const auto errors = run_ranks(kRanks, [&](int r) {
        Rng delay = Rng(7).fork(r);
        for (int round = 0; round < kRounds; ++round) {
            if (delay.below(4) == 0)
                std::this_thread::sleep_for(std::chrono::microseconds(delay.below(300)));
            arrived.fetch_add(1);
            group.rank(r).barrier();
            // Everyone has arrived for this round, and nobody can be past the next barrier.
            if (arrived.load() < (round + 1) * kRanks) early.fetch_add(1);
            group.rank(r).barrier();
        }
    });
    for (int r = 0; r < kRanks; ++r) ASSERT_EQ(errors[r], "");
    EXPECT_EQ(early.load(), 0);
    EXPECT_EQ(arrived.load(), kRounds * kRanks);
}

TEST(InProcess, AbortWakesBlockedRanksWithTheReason) {
    constexpr int kRanks = 5;
    InProcessGroup group(kRanks);
    std::atomic<int> blocked{0};
    std::vector<float> buf(kRanks * 10, 1.0f);
    const auto errors = run_ranks(kRanks, [&](int r) {
        if (r == 0) {
            // Rank 0 never joins; it aborts once the others are (about to be) blocked.
            while (blocked.load() < kRanks - 1) std::this_thread::yield();
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            group.abort("worker 0 ran out of memory");
            return;
        }
        blocked.fetch_add(1);
        if (r % 2)
            group.rank(r).barrier();
        else
            group.rank(r).all_reduce_sum(buf.data() + r * 10, 10);
    });
    EXPECT_EQ(errors[0], "");
    for (int r = 1; r < kRanks; ++r) {
        EXPECT_NE(errors[r].find("worker 0 ran out of memory"), std::string::npos) << errors[r];
        EXPECT_NE(errors[r].find("rank " + std::to_string(r)), std::string::npos) << errors[r];
    }
    EXPECT_TRUE(group.aborted());
    // Later collectives fail at once, and the first reason is kept.
    group.abort("a later reason");
    try {
        group.rank(1).barrier();
        ADD_FAILURE() << "barrier after abort did not throw";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("worker 0 ran out of memory"), std::string::npos);
    }
}

TEST(InProcess, MismatchedCollectivesFailOnEveryRank) {
    InProcessGroup group(3);
    std::vector<std::vector<float>> bufs(3, std::vector<float>(8, 1.0f));
    const auto errors =
        run_ranks(3, [&](int r) { group.rank(r).all_reduce_sum(bufs[r].data(), r == 2 ? 7 : 8); });
    for (int r = 0; r < 3; ++r) {
        EXPECT_NE(errors[r].find("collective mismatch"), std::string::npos) << errors[r];
        EXPECT_NE(errors[r].find("n=7"), std::string::npos) << errors[r];
    }
}

TEST(InProcess, SharedBufferIsRejected) {
    InProcessGroup group(2);
    std::vector<float> shared(4, 1.0f);
    const auto errors =
        run_ranks(2, [&](int r) { group.rank(r).all_reduce_sum(shared.data(), shared.size()); });
    for (int r = 0; r < 2; ++r)
        EXPECT_NE(errors[r].find("same buffer"), std::string::npos) << errors[r];
}

}  // namespace
}  // namespace dflash

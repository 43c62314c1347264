// WorldGroup and the launch settings (src/comm/world_group.h, launch.h): two "processes" of two
// worker threads each, played by one test process with two TcpGroups on localhost. Sums are
// ((a0 + a1) + (b0 + b1)) on every worker; one process gives InProcessGroup's bits exactly; a
// broadcast reaches every worker from any global root. torchrun/mpirun/Slurm variables set the
// launch settings, named as their source; a DFLASH_ mirror wins over them.
#include "comm/world_group.h"

#include <gtest/gtest.h>

#include <thread>

#include "comm/rank_threads.h"
#include "config/environment.h"
#include "config/registry.h"
#include "core/rng.h"
#include "options/launch_options.h"
#include "support/test_util.h"

namespace dflash {
namespace {

// Runs fn(global rank, comm) on `procs` x `local` threads: one WorldGroup per "process".
std::vector<std::string> run_world(int procs, int local,
                                   const std::function<void(int, Communicator&)>& fn) {
    TcpListener listener("127.0.0.1", 0);
    std::vector<std::unique_ptr<WorldGroup>> groups(static_cast<size_t>(procs));
    auto errors = test::run_ranks(procs, [&](int p) {
        TcpGroupOptions o;
        o.rank = p;
        o.world = procs;
        o.master_port = listener.port();
        o.timeout_s = 20;
        groups[static_cast<size_t>(p)] = std::make_unique<WorldGroup>(
            local, std::make_unique<TcpGroup>(o, p == 0 ? &listener : nullptr));
    });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    return test::run_ranks(procs * local, [&](int g) {
        WorldGroup& wg = *groups[static_cast<size_t>(g / local)];
        Communicator& c = wg.local(g % local);
        EXPECT_EQ(c.rank(), g);
        EXPECT_EQ(c.size(), procs * local);
        fn(g, c);
    });
}

std::vector<std::vector<float>> random_inputs(int ranks, size_t n) {
    std::vector<std::vector<float>> in(static_cast<size_t>(ranks), std::vector<float>(n));
    for (int r = 0; r < ranks; ++r) {
        Rng rng(7 + static_cast<uint64_t>(r));
        for (auto& x : in[static_cast<size_t>(r)])
            x = (rng.uniform() - 0.5f) * static_cast<float>(1 << (4 * r));
    }
    return in;
}

TEST(WorldGroup, SumsThreadsThenProcessesOnEveryWorker) {
    const size_t n = 4099;
    const auto in = random_inputs(4, n);
    auto got = in;
    const auto errors =
        run_world(2, 2, [&](int g, Communicator& c) { c.all_reduce_sum(got[g].data(), n); });
    for (const auto& e : errors) EXPECT_EQ(e, "");
    size_t not_serial = 0;
    for (size_t i = 0; i < n; ++i) {
        const float want = (in[0][i] + in[1][i]) + (in[2][i] + in[3][i]);
        for (int g = 0; g < 4; ++g) ASSERT_EQ(got[g][i], want) << "worker " << g << " i " << i;
        not_serial += ((in[0][i] + in[1][i]) + in[2][i]) + in[3][i] != want ? 1 : 0;
    }
    EXPECT_GT(not_serial, 0u);  // the layout's order is what is asserted, not any order
}

TEST(WorldGroup, OneWorkerPerProcessIsTheRankOrderSumAndOneProcessIsInProcessGroup) {
    const size_t n = 1000;
    const auto in = random_inputs(3, n);
    auto a = in, b = in;
    auto errors =
        run_world(3, 1, [&](int g, Communicator& c) { c.all_reduce_sum(a[g].data(), n); });
    WorldGroup alone(3, nullptr);
    InProcessGroup threads(3);
    auto c = in;
    errors = test::run_ranks(3, [&](int r) {
        alone.local(r).all_reduce_sum(b[r].data(), n);
        threads.rank(r).all_reduce_sum(c[r].data(), n);
    });
    for (size_t i = 0; i < n; ++i) {
        const float want = (in[0][i] + in[1][i]) + in[2][i];
        for (int g = 0; g < 3; ++g) {
            ASSERT_EQ(a[g][i], want);
            ASSERT_EQ(b[g][i], c[g][i]);
        }
    }
}

TEST(WorldGroup, BroadcastsFromEveryGlobalRootAndBarriers) {
    for (int root = 0; root < 6; ++root) {
        std::vector<std::vector<double>> buf(6, std::vector<double>(33, -1.0));
        for (int i = 0; i < 33; ++i) buf[root][i] = root * 100 + i;
        const auto errors = run_world(3, 2, [&](int g, Communicator& c) {
            c.barrier();
            c.broadcast(buf[g].data(), 33 * sizeof(double), root);
        });
        for (int g = 0; g < 6; ++g) {
            EXPECT_EQ(errors[g], "");
            EXPECT_EQ(buf[g], buf[root]) << "root " << root << " worker " << g;
        }
    }
}

config::Settings settings_from_env(std::map<std::string, std::string> vars) {
    auto reg = std::make_shared<const config::Registry>(config::make_registry());
    return config::Settings(reg).with(
        config::environment_assignments(*reg, config::Environment(std::move(vars))));
}

TEST(Launch, LaunchersVariablesSetItAndAreNamedAsTheSource) {
    const Launch torchrun = launch_from_settings(settings_from_env({{"RANK", "1"},
                                                                    {"WORLD_SIZE", "2"},
                                                                    {"LOCAL_RANK", "1"},
                                                                    {"LOCAL_WORLD_SIZE", "2"},
                                                                    {"MASTER_ADDR", "node7"},
                                                                    {"MASTER_PORT", "29611"}}));
    EXPECT_EQ(torchrun.rank, 1);
    EXPECT_EQ(torchrun.world, 2);
    EXPECT_EQ(torchrun.master_addr, "node7");
    EXPECT_EQ(torchrun.master_port, 29611);
    EXPECT_EQ(torchrun.rank_source, "env:RANK");
    EXPECT_EQ(node_device_index(torchrun, 1, 0), 1);  // one GPU per process: GPU LOCAL_RANK
    EXPECT_EQ(node_device_index(torchrun, 4, 3), 7);

    const Launch mpi = launch_from_settings(settings_from_env(
        {{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"SLURM_PROCID", "0"}}));
    EXPECT_EQ(mpi.rank, 3);  // OpenMPI's variable comes before Slurm's
    EXPECT_EQ(mpi.rank_source, "env:OMPI_COMM_WORLD_RANK");
    const Launch slurm =
        launch_from_settings(settings_from_env({{"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "3"}}));
    EXPECT_EQ(slurm.rank, 2);
    EXPECT_EQ(slurm.world_source, "env:SLURM_NTASKS");
    const Launch mirror = launch_from_settings(
        settings_from_env({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"DFLASH_LAUNCH_RANK", "3"}}));
    EXPECT_EQ(mirror.rank, 3);
    EXPECT_EQ(mirror.rank_source, "env:DFLASH_LAUNCH_RANK");

    EXPECT_TRUE(
        test::has(test::error_of([] {
                      launch_from_settings(settings_from_env({{"RANK", "2"}, {"WORLD_SIZE", "2"}}));
                  }),
                  "launch.rank=2 (env:RANK) but launch.world_size=2 (env:WORLD_SIZE)"));
    EXPECT_TRUE(test::has(test::error_of([] { settings_from_env({{"RANK", "one"}}); }), "RANK"));
}

TEST(Launch, TheAgreementLeavesOutOnlyLaunchAndLogLevel) {
    const auto a = settings_from_env({{"RANK", "0"}, {"WORLD_SIZE", "2"}});
    const auto b = settings_from_env(
        {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"DFLASH_RUNTIME_LOG_LEVEL", "debug"}});
    EXPECT_EQ(launch_agreement(a), launch_agreement(b));
    const auto c = settings_from_env({{"RANK", "1"}, {"DFLASH_TRAIN_LR", "0.5"}});
    EXPECT_NE(launch_agreement(a), launch_agreement(c));
    EXPECT_FALSE(test::has(launch_agreement(a), "launch."));
}

}  // namespace
}  // namespace dflash

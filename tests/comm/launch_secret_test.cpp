// The launch secret (src/comm/launch.h): read from a file of this user that group and others
// cannot read, trailing white space dropped, at least 16 bytes; refused otherwise, naming the file
// and the fix. DFLASH_LAUNCH_SECRET_FILE and launch.hello_timeout_s reach the Launch; two
// processes joined by join_processes with the same secret file meet, and with different files
// the one refused says why.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <filesystem>

#include "comm/rank_threads.h"
#include "config/environment.h"
#include "config/registry.h"
#include "options/launch_options.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

std::string secret_file(const test::TempDir& dir, const std::string& name,
                        const std::string& content, mode_t mode) {
    const fs::path p = dir / name;
    test::write_file(p, content);
    EXPECT_EQ(::chmod(p.c_str(), mode), 0);
    return p.string();
}

TEST(LaunchSecret, IsReadFromAPrivateFileWithoutTrailingWhiteSpace) {
    test::TempDir dir("launch_secret");
    const std::string hex = "3f1c9a0b7d2e4f6a8b5c1d3e7f9a0b2c";
    EXPECT_EQ(read_launch_secret(secret_file(dir, "a", hex + "\n", 0600), "test"), hex);
    EXPECT_EQ(read_launch_secret(secret_file(dir, "b", hex + " \r\n\n", 0400), "test"), hex);
    // Inner bytes are kept as they are (any bytes make a key).
    const std::string raw = std::string("\x01\x00\xff key with spaces inside", 26);
    EXPECT_EQ(read_launch_secret(secret_file(dir, "c", raw, 0600), "test"), raw);
}

TEST(LaunchSecret, AFileOthersCanReadIsRefused) {
    test::TempDir dir("launch_secret");
    const std::string hex = "3f1c9a0b7d2e4f6a8b5c1d3e7f9a0b2c";
    for (const mode_t mode : {0644, 0640, 0604, 0620, 0602}) {
        const std::string path = secret_file(dir, "s", hex, mode);
        const std::string e =
            test::error_of([&] { read_launch_secret(path, "env:DFLASH_LAUNCH_SECRET_FILE"); });
        EXPECT_TRUE(test::has(e, "can be read or written by group or others")) << mode << e;
        EXPECT_TRUE(test::has(e, "chmod 600")) << e;
        EXPECT_TRUE(test::has(e, "env:DFLASH_LAUNCH_SECRET_FILE")) << e;
    }
}

TEST(LaunchSecret, AShortMissingOrOddFileIsRefused) {
    test::TempDir dir("launch_secret");
    std::string e = test::error_of(
        [&] { read_launch_secret(secret_file(dir, "short", "hunter2\n", 0600), "test"); });
    EXPECT_TRUE(test::has(e, "holds 7 bytes; a launch secret needs at least 16")) << e;
    EXPECT_TRUE(test::has(e, "openssl rand -hex 32")) << e;
    e = test::error_of([&] { read_launch_secret((dir / "absent").string(), "test"); });
    EXPECT_TRUE(test::has(e, "cannot be opened")) << e;
    fs::create_directories(dir / "a_directory");
    ::chmod((dir / "a_directory").c_str(), 0700);
    e = test::error_of([&] { read_launch_secret((dir / "a_directory").string(), "test"); });
    EXPECT_TRUE(test::has(e, "is not a regular file")) << e;
}

config::Settings settings_from_env(std::map<std::string, std::string> vars) {
    auto reg = std::make_shared<const config::Registry>(config::make_registry());
    return config::Settings(reg).with(
        config::environment_assignments(*reg, config::Environment(std::move(vars))));
}

TEST(LaunchSecret, TheSettingsNameTheFileAndTheHelloDeadline) {
    const Launch none = launch_from_settings(settings_from_env({}));
    EXPECT_EQ(none.secret_file, "");
    EXPECT_EQ(none.hello_timeout_s, 5.0);
    const Launch l = launch_from_settings(
        settings_from_env({{"DFLASH_LAUNCH_SECRET_FILE", "/run/user/1000/job.secret"},
                           {"DFLASH_LAUNCH_HELLO_TIMEOUT_S", "2.5"}}));
    EXPECT_EQ(l.secret_file, "/run/user/1000/job.secret");
    EXPECT_EQ(l.secret_file_source, "env:DFLASH_LAUNCH_SECRET_FILE");
    EXPECT_EQ(l.hello_timeout_s, 2.5);
}

TEST(LaunchSecret, JoinProcessesUsesTheSecretFile) {
    test::TempDir dir("launch_secret");
    const std::string same = secret_file(dir, "same", "3f1c9a0b7d2e4f6a8b5c1d3e7f9a0b2c\n", 0600);
    const std::string other = secret_file(dir, "other", "0000000000000000000000000000000\n", 0600);
    for (const bool agree : {true, false}) {
        // A port free a moment ago (join_processes makes process 0's listener itself).
        const int port = [] {
            TcpListener l("127.0.0.1", 0);
            return l.port();
        }();
        const auto errors = test::run_ranks(2, [&](int r) {
            Launch l;
            l.rank = r;
            l.world = 2;
            l.master_addr = "127.0.0.1";
            l.master_port = port;
            l.timeout_s = agree ? 10 : 1;
            l.hello_timeout_s = 2;
            l.secret_file = r == 1 && !agree ? other : same;
            auto g = join_processes(l, "train.lr = 0.001\n");
            ASSERT_NE(g, nullptr);
            float x = static_cast<float>(r + 1);
            g->all_reduce_sum(&x, 1);
            EXPECT_EQ(x, 3.0f);
        });
        if (agree) {
            EXPECT_EQ(errors, (std::vector<std::string>{"", ""}));
        } else {
            EXPECT_TRUE(test::has(errors[0], "(missing: 1)")) << errors[0];
            EXPECT_TRUE(test::has(errors[0], "1 without a valid proof of the launch secret"))
                << errors[0];
            EXPECT_TRUE(test::has(errors[1], "was dropped by process 0")) << errors[1];
        }
    }
}

}  // namespace
}  // namespace dflash

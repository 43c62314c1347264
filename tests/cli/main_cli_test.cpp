// The `dflash` entry point (src/cli/main.cpp) through the built binary: usage and version, an
// unknown command with the nearest suggested, every error as one `dflash: error:` line with exit
// status 1 (never called a bug: the wording of each error kind is tested by
// tests/core/error_test.cpp), `--config DIR` refused, and output that cannot be written (stdout on
// /dev/full) turning success into failure.
#include <gtest/gtest.h>

#include <algorithm>

#include "support/test_util.h"

namespace dflash {
namespace {

using test::has;

TEST(MainCli, UsageAndVersion) {
    const auto none = test::run_dflash("");
    EXPECT_EQ(none.exit_code, 2) << none.output;
    EXPECT_TRUE(has(none.output, "usage: dflash COMMAND")) << none.output;
    const auto help = test::run_dflash("--help");
    EXPECT_EQ(help.exit_code, 0) << help.output;
    for (const char* cmd : {"demo", "train", "pretrain", "generate", "bench", "data", "inspect"})
        EXPECT_TRUE(has(help.output, std::string("  ") + cmd)) << cmd;
    const auto version = test::run_dflash("--version");
    EXPECT_EQ(version.exit_code, 0);
    EXPECT_TRUE(has(version.output, "dflash ")) << version.output;
}

TEST(MainCli, UnknownCommandSuggestsTheNearest) {
    const auto r = test::run_dflash("trian");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(r.output,
              "dflash: error: unknown command `trian` (did you mean `train`?); `dflash "
              "--help` lists the commands\n");
}

TEST(MainCli, AUserErrorIsNeverCalledABug) {
    // With `--log-level debug`, the same one line says where the error was raised.
    const auto r = test::run_dflash("trian --log-level debug");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(r.output.starts_with("dflash: error: unknown command `trian`")) << r.output;
    EXPECT_TRUE(has(r.output, " (raised at main.cpp:")) << r.output;
    EXPECT_FALSE(has(r.output, "internal error")) << r.output;
    EXPECT_FALSE(has(r.output, "bug")) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(MainCli, AConfigDirectoryIsAnError) {
    test::TempDir dir;
    const auto r = test::run_dflash("config show train.lr --config " + dir.path().string());
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(
        has(r.output, "dflash: error: config file '" + dir.path().string() + "' is a directory"))
        << r.output;
}

TEST(MainCli, StdoutThatCannotBeWrittenIsAFailure) {
    // `config list` prints a long table: all of it is lost on /dev/full.
    test::DflashProcess p({"config", "list"}, "/dev/full");
    const auto r = p.finish();
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "dflash: error: writing to standard output failed: No space left"))
        << r.output;
    test::DflashProcess ok({"config", "list"}, "/dev/null");
    EXPECT_EQ(ok.finish().exit_code, 0);
}

}  // namespace
}  // namespace dflash

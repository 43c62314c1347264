// `dflash data prepare` / `verify` through the built binary: verify passes a prepared dataset and
// fails (exit 1, every problem listed) once a shard is deleted; a prepare into a directory another
// process holds is refused naming that process's pid, and leaves nothing behind.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "core/dir_lock.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::has;

std::string prepare_args(const fs::path& in, const fs::path& out) {
    return "data prepare -i " + in.string() + " -o " + out.string() + " --samples-per-shard 2";
}

TEST(DataCli, VerifyChecksTheDirectoryAgainstItsManifest) {
    test::TempDir dir;
    std::string lines;
    for (int i = 0; i < 5; ++i) lines += "{\"text\": \"sample " + std::to_string(i) + "\"}\n";
    test::write_file(dir / "in.jsonl", lines);
    const auto prep = test::run_dflash(prepare_args(dir / "in.jsonl", dir / "ds"));
    ASSERT_EQ(prep.exit_code, 0) << prep.output;
    auto v = test::run_dflash("data verify " + (dir / "ds").string());
    EXPECT_EQ(v.exit_code, 0) << v.output;
    EXPECT_TRUE(has(v.output, ": ok, 3 shard(s), 5 samples")) << v.output;
    fs::remove(dir / "ds" / "shard-00001.dfshard");
    v = test::run_dflash("data verify " + (dir / "ds").string());
    EXPECT_EQ(v.exit_code, 1) << v.output;
    EXPECT_TRUE(has(v.output, "BROKEN")) << v.output;
    EXPECT_TRUE(has(v.output, "shard-00001.dfshard is listed in manifest.json but missing"))
        << v.output;
}

TEST(DataCli, ASecondWriterIsRefusedNamingTheHolder) {
    test::TempDir dir;
    test::write_file(dir / "in.jsonl", "{\"text\": \"hello\"}\n");
    // This test process is the first writer.
    const DirLock held = DirLock::acquire(dir / "ds", "dataset directory", "the test");
    const auto r = test::run_dflash(prepare_args(dir / "in.jsonl", dir / "ds"));
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_TRUE(has(r.output, "is in use by pid " + std::to_string(::getpid()) + " (the test)"))
        << r.output;
    for (const auto& e : fs::directory_iterator(dir / "ds"))
        EXPECT_EQ(e.path().filename(), kDirLockFile) << "a refused writer wrote " << e.path();
    EXPECT_FALSE(fs::exists(dir / ".ds.dflash-partial"));
}

}  // namespace
}  // namespace dflash

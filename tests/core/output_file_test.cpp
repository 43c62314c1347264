// Output files (src/core/output_file.h, src/core/atomic_file.h): a symlink is written through to
// its target and stays a link; a directory, a FIFO or a device at the path is refused before
// anything is written and is left as it was; a missing directory is caught by the up-front check;
// a failed rename reports the rename's own error; and `bench --json` / `plot -o` refuse a bad
// path before doing any work.
#include "core/output_file.h"

#include <sys/stat.h>

#include <filesystem>

#include "core/atomic_file.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::has;

TEST(OutputFile, WritesThroughASymlinkAndKeepsTheLink) {
    test::TempDir dir;
    write_text_atomic(dir / "real.json", "old");
    fs::create_symlink("real.json", dir / "link.json");
    write_text_atomic(dir / "link.json", "new");
    EXPECT_TRUE(fs::is_symlink(dir / "link.json"));
    EXPECT_EQ(test::read_file(dir / "real.json"), "new");
    EXPECT_EQ(resolve_output_file(dir / "link.json"), dir / "real.json");
}

TEST(OutputFile, ADanglingSymlinkCreatesItsTarget) {
    test::TempDir dir;
    fs::create_directories(dir / "sub");
    fs::create_symlink(dir / "sub" / "target.txt", dir / "link.txt");
    write_text_atomic(dir / "link.txt", "x");
    EXPECT_TRUE(fs::is_symlink(dir / "link.txt"));
    EXPECT_EQ(test::read_file(dir / "sub" / "target.txt"), "x");
}

TEST(OutputFile, SymlinkLoopsAreErrors) {
    test::TempDir dir;
    fs::create_symlink("b", dir / "a");
    fs::create_symlink("a", dir / "b");
    EXPECT_TRUE(has(error_of([&] { write_text_atomic(dir / "a", "x"); }), "symbolic links"));
}

TEST(OutputFile, NonRegularTargetsAreRefusedAndLeftAlone) {
    test::TempDir dir;
    fs::create_directories(dir / "adir");
    ASSERT_EQ(::mkfifo((dir / "fifo").c_str(), 0644), 0);
    fs::create_symlink(dir / "adir", dir / "link-to-dir");
    const std::pair<fs::path, const char*> cases[] = {{dir / "adir", "is a directory"},
                                                      {dir / "fifo", "is a FIFO"},
                                                      {dir / "link-to-dir", "is a directory"},
                                                      {"/dev/null", "is a character device"}};
    for (const auto& [p, kind] : cases) {
        EXPECT_TRUE(has(error_of([&] { write_text_atomic(p, "x"); }), kind)) << p;
        EXPECT_TRUE(has(error_of([&] { check_output_file(p, "--json"); }), kind)) << p;
        EXPECT_TRUE(has(error_of([&] { check_output_file(p, "--json"); }), "--json")) << p;
    }
    EXPECT_TRUE(fs::is_directory(dir / "adir"));
    EXPECT_TRUE(fs::is_empty(dir / "adir"));
    EXPECT_TRUE(fs::is_fifo(dir / "fifo"));
    EXPECT_TRUE(fs::is_character_file("/dev/null"));
    EXPECT_FALSE(fs::exists(dir / "fifo.tmp"));
}

TEST(OutputFile, CheckCatchesAMissingDirectoryAndLeavesNothing) {
    test::TempDir dir;
    EXPECT_TRUE(has(error_of([&] { check_output_file(dir / "no" / "x.json", "--json"); }),
                    "does not exist"));
    EXPECT_EQ(check_output_file(dir / "x.json"), dir / "x.json");
    EXPECT_FALSE(fs::exists(dir / "x.json"));
    EXPECT_FALSE(fs::exists(dir / "x.json.tmp"));
}

TEST(OutputFile, ARenameFailureReportsTheRenameError) {
    test::TempDir dir;
    const fs::path p = dir / "x.txt";
    AtomicFileWriter w(p);
    w.write("abc", 3);
    // Between open and commit something made the name a non-empty directory.
    test::write_file(p / "inside", "keep");
    const std::string e = error_of([&] { w.commit(); });
    EXPECT_TRUE(has(e, "cannot rename")) << e;
    EXPECT_TRUE(has(e, "Is a directory") || has(e, "Directory not empty")) << e;
    EXPECT_FALSE(has(e, "Success")) << e;
    EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
    EXPECT_EQ(test::read_file(p / "inside"), "keep");
}

TEST(OutputFileCli, BenchAndPlotRefuseABadOutputBeforeAnyWork) {
    test::TempDir dir;
    fs::create_directories(dir / "adir");
    // The target does not exist: an error about --json shows the check ran before loading.
    const auto bench = test::run_dflash("bench --target " + (dir / "none").string() +
                                        " --drafter " + (dir / "none").string() + " --prompts " +
                                        (dir / "none.jsonl").string() + " --json /dev/null");
    EXPECT_EQ(bench.exit_code, 1) << bench.output;
    EXPECT_TRUE(has(bench.output, "--json '/dev/null' is a character device")) << bench.output;
    const auto missing_dir =
        test::run_dflash("bench --target " + (dir / "none").string() + " --drafter " +
                         (dir / "none").string() + " --prompts " + (dir / "none.jsonl").string() +
                         " --json " + (dir / "nodir" / "b.json").string());
    EXPECT_TRUE(has(missing_dir.output, "does not exist")) << missing_dir.output;
    EXPECT_TRUE(has(missing_dir.output, "--json")) << missing_dir.output;

    test::write_file(dir / "run" / "metrics.jsonl", "{\"step\": 1, \"loss\": 2.0}\n");
    const auto plot =
        test::run_dflash("plot " + (dir / "run").string() + " -o " + (dir / "adir").string());
    EXPECT_EQ(plot.exit_code, 1) << plot.output;
    EXPECT_TRUE(has(plot.output, "is a directory")) << plot.output;
    EXPECT_TRUE(fs::is_empty(dir / "adir"));
}

}  // namespace
}  // namespace dflash

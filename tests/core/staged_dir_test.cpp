// Staged directory replacement (src/core/staged_dir.h): the target keeps its old content until
// commit(), which swaps the new content in whole; an abandoned stage is removed and changes
// nothing; both directories are locked meanwhile.
#include "core/staged_dir.h"

#include <filesystem>

#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::has;

TEST(StagedDir, CommitSwapsTheNewContentInWhole) {
    test::TempDir dir;
    test::write_file(dir / "out" / "old.txt", "old");
    {
        StagedDirectory s(dir / "out", "output directory", "test");
        EXPECT_EQ(s.path(), dir / ".out.dflash-partial");
        test::write_file(s.path() / "new.txt", "new");
        EXPECT_TRUE(fs::exists(dir / "out" / "old.txt"));  // untouched until commit
        EXPECT_FALSE(fs::exists(dir / "out" / "new.txt"));
        s.commit();
        EXPECT_EQ(test::read_file(dir / "out" / "new.txt"), "new");
        EXPECT_FALSE(fs::exists(dir / "out" / "old.txt"));
        EXPECT_FALSE(fs::exists(s.path()));
        // Still locked after the swap, until the object dies.
        EXPECT_TRUE(has(error_of([&] { DirLock::acquire(dir / "out", "output directory", "x"); }),
                        "in use"));
    }
    EXPECT_NO_THROW(DirLock::acquire(dir / "out", "output directory", "x"));
}

TEST(StagedDir, AnAbandonedStageChangesNothing) {
    test::TempDir dir;
    test::write_file(dir / "out" / "old.txt", "old");
    {
        StagedDirectory s(dir / "out", "output directory", "test");
        test::write_file(s.path() / "half.txt", "half");
    }  // as when an exception unwinds
    EXPECT_EQ(test::read_file(dir / "out" / "old.txt"), "old");
    EXPECT_FALSE(fs::exists(dir / "out" / "half.txt"));
    EXPECT_FALSE(fs::exists(dir / ".out.dflash-partial"));
    EXPECT_FALSE(holds_files(dir / "missing"));
    EXPECT_TRUE(holds_files(dir / "out"));
}

TEST(StagedDir, LeftoversOfACrashedAttemptAreCleared) {
    test::TempDir dir;
    test::write_file(dir / ".out.dflash-partial" / "stale.txt", "stale");
    StagedDirectory s(dir / "out", "output directory", "test");
    EXPECT_FALSE(fs::exists(s.path() / "stale.txt"));
    s.commit();
    EXPECT_FALSE(fs::exists(dir / "out" / "stale.txt"));
}

TEST(StagedDir, ASecondBuilderIsRefused) {
    test::TempDir dir;
    StagedDirectory s(dir / "out", "output directory", "first");
    EXPECT_TRUE(has(error_of([&] { StagedDirectory t(dir / "out", "output directory", "second"); }),
                    "(first)"));
}

}  // namespace
}  // namespace dflash

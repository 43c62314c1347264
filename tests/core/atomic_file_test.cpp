// AtomicFileWriter / write_text_atomic (src/core/atomic_file.h): a committed write replaces the
// file; one abandoned before commit() leaves the old contents and no temporary behind.
#include "core/atomic_file.h"

#include <filesystem>

#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

TEST(AtomicFile, InterruptedWriteLeavesTheOldFile) {
    test::TempDir dir;
    const auto p = dir / "x.txt";
    write_text_atomic(p, "old");
    {
        AtomicFileWriter w(p);
        w.write("new contents", 12);
        // destroyed without commit(), as when an exception unwinds mid-write
    }
    EXPECT_EQ(test::read_file(p), "old");
    EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
}

TEST(AtomicFile, CommitReplacesTheFile) {
    test::TempDir dir;
    const auto p = dir / "x.txt";
    write_text_atomic(p, "old");
    AtomicFileWriter w(p);
    w.write("new ", 4);
    w.write("contents", 8);
    EXPECT_EQ(test::read_file(p), "old");  // nothing visible before commit()
    w.commit();
    EXPECT_EQ(test::read_file(p), "new contents");
    EXPECT_FALSE(fs::exists(p.string() + ".tmp"));
}

}  // namespace
}  // namespace dflash

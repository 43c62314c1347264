// Directory locks (src/core/dir_lock.h): a second lock on a directory — in this process or in
// another — is refused naming the holder's pid; the lock is released when its holder lets go or
// exits (even by SIGKILL), and the file left behind blocks nobody.
#include "core/dir_lock.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using test::error_of;
using test::has;

TEST(DirLock, ASecondHolderIsRefusedUntilTheFirstLetsGo) {
    test::TempDir dir;
    std::optional<DirLock> first = DirLock::acquire(dir / "run", "run directory", "first");
    EXPECT_TRUE(fs::is_directory(dir / "run"));
    const std::string e = error_of([&] { DirLock::acquire(dir / "run", "run directory", "x"); });
    EXPECT_TRUE(has(e, "the run directory '" + (dir / "run").string() + "' is in use by pid " +
                           std::to_string(::getpid()) + " (first)"))
        << e;
    first.reset();
    EXPECT_NO_THROW(DirLock::acquire(dir / "run", "run directory", "second"));
    // Moving a lock keeps it held.
    DirLock a = DirLock::acquire(dir / "run", "run directory", "a");
    DirLock b = std::move(a);
    EXPECT_FALSE(error_of([&] { DirLock::acquire(dir / "run", "run directory", "c"); }).empty());
}

TEST(DirLock, AnotherProcessHoldingTheLockIsNamedAndItsExitReleasesIt) {
    test::TempDir dir;
    int ready[2], hold[2];
    ASSERT_EQ(::pipe(ready), 0);
    ASSERT_EQ(::pipe(hold), 0);
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // The child takes the lock, says so, and holds it until it is killed.
        try {
            const DirLock l = DirLock::acquire(dir / "run", "run directory", "child");
            (void)!::write(ready[1], "x", 1);
            char c;
            (void)!::read(hold[0], &c, 1);
        } catch (...) {
        }
        ::_exit(0);
    }
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
    const std::string e = error_of([&] { DirLock::acquire(dir / "run", "run directory", "me"); });
    EXPECT_TRUE(has(e, "in use by pid " + std::to_string(child) + " (child)")) << e;
    ::kill(child, SIGKILL);  // no clean-up runs: the kernel still drops the lock
    int status = 0;
    ::waitpid(child, &status, 0);
    EXPECT_NO_THROW(DirLock::acquire(dir / "run", "run directory", "me"));
    EXPECT_TRUE(fs::exists(dir / "run" / kDirLockFile));
}

TEST(DirLock, APathThatIsAFileIsAnError) {
    test::TempDir dir;
    test::write_file(dir / "file", "x");
    EXPECT_TRUE(has(error_of([&] { DirLock::acquire(dir / "file", "run directory", "me"); }),
                    "cannot create the run directory"));
}

}  // namespace
}  // namespace dflash

// One writer per directory (docs/design.md "Errors", nothing is lost): every command that writes a
// run, dataset or model directory holds an exclusive flock(2) on `<dir>/.dflash.lock`, which
// records the holder's pid and command. A second writer — another process, or a second lock in this
// one — is refused at once with the holder's pid instead of interleaving its files with the
// first's. The kernel releases the lock when the holder exits, however it exits, so the file left
// behind never blocks anyone. Tested by tests/core/dir_lock_test.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace dflash {

inline constexpr const char* kDirLockFile = ".dflash.lock";

class DirLock {
  public:
    // Creates `dir` (and its parents) if missing and locks it. `what` names the directory's role
    // in errors ("run directory", "dataset directory"); `holder` describes this process to a
    // refused writer ("dflash train"). Throws dflash::Error naming the holder's pid when another
    // lock is held.
    static DirLock acquire(const std::filesystem::path& dir, std::string_view what,
                           std::string_view holder);

    DirLock(DirLock&& o) noexcept;
    DirLock& operator=(DirLock&& o) noexcept;
    DirLock(const DirLock&) = delete;
    DirLock& operator=(const DirLock&) = delete;
    ~DirLock();

    const std::filesystem::path& dir() const { return dir_; }

  private:
    DirLock(std::filesystem::path dir, int fd) : dir_(std::move(dir)), fd_(fd) {}
    void release();

    std::filesystem::path dir_;
    int fd_ = -1;
};

}  // namespace dflash

// Directory locks with flock(2) (dir_lock.h). Tested by tests/core/dir_lock_test.cpp.
#include "core/dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace dflash {

namespace fs = std::filesystem;

namespace {

// What the holder wrote into the lock file ("pid 1234 (dflash train)"), or a note that it has
// not written it yet.
std::string read_holder(int fd) {
    char buf[256] = {};
    const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
    while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
    return s.empty() ? "a process that is still starting" : s;
}

}  // namespace

DirLock DirLock::acquire(const fs::path& dir, std::string_view what, std::string_view holder) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    DF_CHECK(fs::is_directory(dir), "cannot create the {} '{}': {}", what, dir.string(),
             ec ? ec.message() : "a file of that name is in the way");
    const fs::path path = dir / kDirLockFile;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    DF_CHECK(fd >= 0, "cannot create the lock file '{}': {} (is the {} writable?)", path.string(),
             std::strerror(errno), what);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const int err = errno;
        const std::string who = err == EWOULDBLOCK ? read_holder(fd) : std::string();
        ::close(fd);
        DF_CHECK(err != EWOULDBLOCK,
                 "the {} '{}' is in use by {}; wait for it to finish (or stop it), or choose "
                 "another directory",
                 what, dir.string(), who);
        DF_FAIL("cannot lock '{}': {}", path.string(), std::strerror(err));
    }
    const std::string me = fmt::format("pid {} ({})\n", ::getpid(), holder);
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) {
        const int err = errno;
        ::close(fd);
        DF_FAIL("cannot write the lock file '{}': {}", path.string(), std::strerror(err));
    }
    return DirLock(dir, fd);
}

DirLock::DirLock(DirLock&& o) noexcept : dir_(std::move(o.dir_)), fd_(std::exchange(o.fd_, -1)) {}

DirLock& DirLock::operator=(DirLock&& o) noexcept {
    if (this != &o) {
        release();
        dir_ = std::move(o.dir_);
        fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
}

DirLock::~DirLock() {
    release();
}

void DirLock::release() {
    // Closing the descriptor drops the flock. The file stays: removing it would let a waiting
    // writer lock an unlinked file while a third locks a new one.
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
}

}  // namespace dflash

// Staged directory replacement (staged_dir.h). Tested by tests/core/staged_dir_test.cpp.
#include "core/staged_dir.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc, _GNU_SOURCE)

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace dflash {

namespace fs = std::filesystem;

namespace {

fs::path sibling(const fs::path& target, std::string_view suffix) {
    return target.parent_path() / ("." + target.filename().string() + std::string(suffix));
}

void remove_tree(const fs::path& p) {
    std::error_code ec;
    fs::remove_all(p, ec);
}

}  // namespace

bool holds_files(const fs::path& dir) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
        if (e.path().filename() != kDirLockFile) return true;
    return false;
}

StagedDirectory::StagedDirectory(const fs::path& target, std::string_view what,
                                 std::string_view holder) {
    DF_CHECK(!target.empty(), "no {} given", what);
    // A symlinked target is replaced where it points, like a file written through a link.
    std::error_code ec;
    target_ = fs::weakly_canonical(fs::absolute(target), ec);
    DF_CHECK(!ec, "cannot resolve the {} '{}': {}", what, target.string(), ec.message());
    target_lock_.emplace(DirLock::acquire(target_, what, holder));
    staging_ = sibling(target_, ".dflash-partial");
    // Only a holder of the target's lock gets here, so what is there is an earlier attempt's.
    remove_tree(staging_);
    staging_lock_.emplace(DirLock::acquire(staging_, what, holder));
}

StagedDirectory::~StagedDirectory() {
    if (committed_) return;
    staging_lock_.reset();
    remove_tree(staging_);
}

void StagedDirectory::commit() {
    DF_ASSERT(!committed_, "commit twice to {}", target_.string());
    if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) != 0) {
        const int err = errno;
        DF_CHECK(err == EINVAL || err == ENOSYS,
                 "cannot swap the new content of '{}' into place: {}; the old content is intact "
                 "and the new one is in '{}'",
                 target_.string(), std::strerror(err), staging_.string());
        // No atomic exchange on this file system: move the old content aside, then the new in.
        const fs::path old = sibling(target_, ".dflash-old");
        remove_tree(old);
        std::error_code ec;
        fs::rename(target_, old, ec);
        DF_CHECK(!ec, "cannot move '{}' aside: {}; nothing was changed", target_.string(),
                 ec.message());
        fs::rename(staging_, target_, ec);
        DF_CHECK(!ec, "cannot move '{}' to '{}': {}; the old content is in '{}'", staging_.string(),
                 target_.string(), ec.message(), old.string());
        committed_ = true;
        target_lock_.reset();
        remove_tree(old);
        return;
    }
    committed_ = true;
    // The staging path now holds the old content, under the old lock: drop both.
    target_lock_.reset();
    remove_tree(staging_);
}

}  // namespace dflash

// A directory replaced whole or not at all (docs/design.md "Errors", nothing is lost): the new
// content is built in a hidden sibling (`.<name>.dflash-partial`) and swapped in by commit() only
// when complete, so an error, a crash or Ctrl-C before that leaves the directory exactly as it was
// (`data prepare --overwrite`, `data regenerate`). Both directories are locked (DirLock) while it
// lives. Tested by tests/core/staged_dir_test.cpp.
#pragma once

#include <filesystem>
#include <optional>
#include <string_view>

#include "core/dir_lock.h"

namespace dflash {

// True when `dir` holds anything besides a lock file (a missing directory holds nothing).
bool holds_files(const std::filesystem::path& dir);

class StagedDirectory {
  public:
    // Locks `target` (creating it if missing) and makes an empty, locked staging directory next
    // to it, removing what an interrupted earlier attempt left there. `what` and `holder` are
    // DirLock's.
    StagedDirectory(const std::filesystem::path& target, std::string_view what,
                    std::string_view holder);
    // Without commit(): the staging directory and everything in it are removed.
    ~StagedDirectory();
    StagedDirectory(const StagedDirectory&) = delete;
    StagedDirectory& operator=(const StagedDirectory&) = delete;

    // Where the new content goes.
    const std::filesystem::path& path() const { return staging_; }
    const std::filesystem::path& target() const { return target_; }

    // Atomically exchanges the staging directory with the target (renameat2 RENAME_EXCHANGE;
    // where the file system lacks it, two renames), then removes the old content. The target
    // stays locked until the object dies.
    void commit();

  private:
    std::filesystem::path target_;
    std::filesystem::path staging_;
    std::optional<DirLock> target_lock_;
    std::optional<DirLock> staging_lock_;
    bool committed_ = false;
};

}  // namespace dflash

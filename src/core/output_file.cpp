// Output-path resolution and checks (output_file.h). Tested by tests/core/output_file_test.cpp.
#include "core/output_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace dflash {

namespace fs = std::filesystem;

namespace {

// Linux gives up after 40 links (ELOOP); so do we.
constexpr int kMaxSymlinks = 40;

}  // namespace

std::string_view file_kind(const fs::file_status& st) {
    switch (st.type()) {
        case fs::file_type::regular:
            return "a regular file";
        case fs::file_type::directory:
            return "a directory";
        case fs::file_type::character:
            return "a character device";
        case fs::file_type::block:
            return "a block device";
        case fs::file_type::fifo:
            return "a FIFO (named pipe)";
        case fs::file_type::socket:
            return "a socket";
        case fs::file_type::symlink:
            return "a symbolic link";
        default:
            return "not a regular file";
    }
}

fs::path resolve_output_file(const fs::path& path, std::string_view what) {
    DF_CHECK(!path.empty(), "{}: the path is empty; give a file name", what);
    fs::path p = path;
    for (int hops = 0;; ++hops) {
        std::error_code ec;
        const fs::file_status st = fs::symlink_status(p, ec);
        if (st.type() != fs::file_type::symlink) break;
        DF_CHECK(hops < kMaxSymlinks, "{} '{}': more than {} symbolic links (a loop?)", what,
                 path.string(), kMaxSymlinks);
        const fs::path target = fs::read_symlink(p, ec);
        DF_CHECK(!ec, "{} '{}': cannot read the symbolic link '{}': {}", what, path.string(),
                 p.string(), ec.message());
        p = target.is_absolute() ? target : p.parent_path() / target;
    }
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    DF_CHECK(!fs::exists(st) || fs::is_regular_file(st),
             "{} '{}'{} is {}, not a regular file; give the path of a file to write (nothing was "
             "written)",
             what, path.string(), p == path ? "" : fmt::format(" (-> '{}')", p.string()),
             file_kind(st));
    return p;
}

fs::path check_output_file(const fs::path& path, std::string_view what) {
    const fs::path p = resolve_output_file(path, what);
    const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
    std::error_code ec;
    DF_CHECK(fs::is_directory(dir, ec),
             "{} '{}': the directory '{}' does not exist; create it first or choose another path",
             what, path.string(), dir.string());
    if (fs::exists(p, ec))
        DF_CHECK(::access(p.c_str(), W_OK) == 0, "{} '{}' exists and is not writable: {}", what,
                 p.string(), std::strerror(errno));
    // Writing goes through `<file>.tmp` and a rename (AtomicFileWriter): prove both can happen.
    const fs::path probe = p.string() + ".tmp";
    const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = errno;
    DF_CHECK(fd >= 0, "{} '{}': cannot create a file in '{}': {}", what, path.string(),
             dir.string(), std::strerror(err));
    ::close(fd);
    ::unlink(probe.c_str());
    return p;
}

}  // namespace dflash

// Checked, bounded reads of input files (input_file.h). Tested by tests/core/input_file_test.cpp.
#include "core/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace dflash {

namespace fs = std::filesystem;

namespace {

constexpr size_t kReadChunk = size_t{1} << 16;

std::string_view mode_kind(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

// " (-> 'target')" when `path` is a symlink, so the message says which file was judged.
std::string link_note(const fs::path& path) {
    std::error_code ec;
    if (!fs::is_symlink(path, ec)) return "";
    const fs::path target = fs::weakly_canonical(path, ec);
    return ec ? std::string() : fmt::format(" (-> '{}')", target.string());
}

[[noreturn]] void fail_not_regular(const fs::path& path, std::string_view what, mode_t mode) {
    DF_FAIL("{} '{}'{} is {}, not a regular file; give the path of a file to read", what,
            path.string(), link_note(path), mode_kind(mode));
}

[[noreturn]] void fail_too_large(const fs::path& path, std::string_view what, uint64_t size,
                                 uint64_t cap) {
    DF_FAIL(
        "{} '{}' is {}, more than the {} cap of a {}; is it the right file? (the cap keeps a wrong "
        "file from filling memory)",
        what, path.string(), byte_size_text(size), byte_size_text(cap), what);
}

// read() that retries when interrupted; throws on an I/O error.
size_t read_some(int fd, char* dst, size_t n, const fs::path& path, std::string_view what) {
    for (;;) {
        const ssize_t got = ::read(fd, dst, n);
        if (got >= 0) return static_cast<size_t>(got);
        if (errno == EINTR) continue;
        DF_FAIL("I/O error reading {} '{}': {}", what, path.string(), std::strerror(errno));
    }
}

}  // namespace

std::string byte_size_text(uint64_t bytes) {
    const double b = static_cast<double>(bytes);
    if (bytes >= (uint64_t{1} << 30))
        return fmt::format("{:.1f} GiB ({} bytes)", b / 1073741824.0, bytes);
    if (bytes >= (uint64_t{1} << 20))
        return fmt::format("{:.1f} MiB ({} bytes)", b / 1048576.0, bytes);
    if (bytes >= (uint64_t{1} << 10))
        return fmt::format("{:.1f} KiB ({} bytes)", b / 1024.0, bytes);
    return fmt::format("{} bytes", bytes);
}

int open_input_file(const fs::path& path, std::string_view what, uint64_t& size) {
    DF_CHECK(!path.empty(), "{}: the path is empty; give a file name", what);
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        struct stat st {};
        // A socket cannot be opened at all (ENXIO): say what it is rather than the errno text.
        if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
            fail_not_regular(path, what, st.st_mode);
        DF_FAIL("cannot open {} '{}': {}", what, path.string(), std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        DF_FAIL("cannot read {} '{}': {}", what, path.string(), std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail_not_regular(path, what, st.st_mode);
    }
    // Regular files never block; clearing the flag keeps later reads plain all the same.
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    size = static_cast<uint64_t>(st.st_size);
    return fd;
}

std::string read_input_file(const fs::path& path, uint64_t max_bytes, std::string_view what) {
    uint64_t size = 0;
    const int fd = open_input_file(path, what, size);
    std::string out;
    try {
        if (size > max_bytes) fail_too_large(path, what, size, max_bytes);
        out.resize(static_cast<size_t>(size));
        size_t have = 0;
        for (;;) {
            // A file that grew since fstat is read on, up to one byte past the cap.
            if (have == out.size()) {
                if (out.size() > max_bytes) fail_too_large(path, what, out.size(), max_bytes);
                out.resize(std::min<uint64_t>(out.size() + kReadChunk, max_bytes + 1));
            }
            const size_t got = read_some(fd, out.data() + have, out.size() - have, path, what);
            if (got == 0) break;
            have += got;
        }
        out.resize(have);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    return out;
}

InputLines::InputLines(const fs::path& path, uint64_t max_line_bytes, std::string_view what)
    : path_(path), what_(what), max_line_bytes_(max_line_bytes) {
    fd_ = open_input_file(path, what, file_bytes_);
}

InputLines::~InputLines() {
    if (fd_ >= 0) ::close(fd_);
}

bool InputLines::fill() {
    if (eof_) return false;
    if (buf_pos_ > 0) {  // drop what was returned, keep the partial line
        buf_.erase(0, buf_pos_);
        buf_pos_ = 0;
    }
    const size_t old = buf_.size();
    buf_.resize(old + kReadChunk);
    const size_t got = read_some(fd_, buf_.data() + old, kReadChunk, path_, what_);
    buf_.resize(old + got);
    eof_ = got == 0;
    return got > 0;
}

bool InputLines::next(std::string& line) {
    auto check_length = [&](size_t n) {
        DF_CHECK(n <= max_line_bytes_,
                 "{} '{}': line {} is longer than the {} cap of a line; each line holds one "
                 "record (is it the right file?)",
                 what_, path_.string(), line_number_ + 1, byte_size_text(max_line_bytes_));
    };
    size_t scanned = buf_pos_;  // where the search for '\n' goes on
    for (;;) {
        const size_t nl = buf_.find('\n', scanned);
        if (nl != std::string::npos) {
            check_length(nl - buf_pos_);
            line.assign(buf_, buf_pos_, nl - buf_pos_);
            consumed_ += nl - buf_pos_ + 1;
            buf_pos_ = nl + 1;
            break;
        }
        check_length(buf_.size() - buf_pos_);
        const size_t searched = buf_.size() - buf_pos_;  // fill() moves the line to the front
        if (!fill()) {
            if (buf_pos_ == buf_.size()) return false;
            line.assign(buf_, buf_pos_, buf_.size() - buf_pos_);  // a last line without '\n'
            consumed_ += line.size();
            buf_pos_ = buf_.size();
            break;
        }
        scanned = buf_pos_ + searched;
    }
    ++line_number_;
    return true;
}

}  // namespace dflash

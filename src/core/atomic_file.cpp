// AtomicFileWriter and write_text_atomic: write to `<path>.tmp`, fsync, rename.
// Tested by tests/core/atomic_file_test.cpp.
#include "core/atomic_file.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/output_file.h"

namespace dflash {

namespace {

std::string quoted(const std::filesystem::path& p) {
    return "'" + p.string() + "'";
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(const std::filesystem::path& path)
    : path_(resolve_output_file(path)), tmp_(path_.string() + ".tmp") {
    file_ = std::fopen(tmp_.c_str(), "wb");
    DF_CHECK(file_ != nullptr, "cannot create {}: {} (is the directory writable?)", quoted(tmp_),
             std::strerror(errno));
}

AtomicFileWriter::~AtomicFileWriter() {
    if (file_ != nullptr) {
        std::fclose(file_);
        std::error_code ec;
        std::filesystem::remove(tmp_, ec);
    }
}

void AtomicFileWriter::write(const void* data, size_t n) {
    DF_ASSERT(file_ != nullptr, "write after commit to {}", path_.string());
    if (n == 0) return;
    DF_CHECK(std::fwrite(data, 1, n, file_) == n, "writing {} failed: {} (disk full?)",
             quoted(tmp_), std::strerror(errno));
}

void AtomicFileWriter::commit() {
    DF_ASSERT(file_ != nullptr, "commit twice to {}", path_.string());
    const bool ok = std::fflush(file_) == 0 && ::fsync(::fileno(file_)) == 0;
    const int err = errno;
    DF_CHECK(ok, "writing {} failed: {} (disk full?)", quoted(tmp_), std::strerror(err));
    std::fclose(std::exchange(file_, nullptr));
    std::error_code ec;
    std::filesystem::rename(tmp_, path_, ec);
    if (ec) {
        // The rename's own error, before removing the temporary overwrites `ec`.
        const std::string why = ec.message();
        std::filesystem::remove(tmp_, ec);
        DF_FAIL("cannot rename {} to {}: {}", quoted(tmp_), quoted(path_), why);
    }
}

void write_text_atomic(const std::filesystem::path& path, const std::string& text) {
    AtomicFileWriter w(path);
    w.write(text.data(), text.size());
    w.commit();
}

}  // namespace dflash

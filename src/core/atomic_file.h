// Files that are either fully written or not there: data goes to `<path>.tmp`, is fsync'ed and
// renamed into place, so the final name never holds a half-written file (checkpoints, manifests,
// settings, shards, safetensors). Tested by tests/core/atomic_file_test.cpp and
// tests/core/output_file_test.cpp.
#pragma once

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <string>

namespace dflash {

// A file written under `<path>.tmp` and renamed to `path` by commit() (after fsync). If commit()
// is never reached (an exception, a full disk) the temporary is removed and `path` is untouched.
// A symlink at `path` is written through (its target is replaced, the link stays); a directory,
// device or FIFO at `path` is refused before anything is written (core/output_file.h).
class AtomicFileWriter {
  public:
    explicit AtomicFileWriter(const std::filesystem::path& path);
    ~AtomicFileWriter();
    AtomicFileWriter(const AtomicFileWriter&) = delete;
    AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

    void write(const void* data, size_t n);
    void commit();
    // The file commit() replaces (`path` with symlinks followed).
    const std::filesystem::path& path() const { return path_; }

  private:
    std::filesystem::path path_;
    std::filesystem::path tmp_;
    std::FILE* file_ = nullptr;
};

// The whole of `text` into `path`, atomically (AtomicFileWriter).
void write_text_atomic(const std::filesystem::path& path, const std::string& text);

}  // namespace dflash

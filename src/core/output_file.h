// Where a result file goes (`bench --json`, `plot -o`, settings, manifests, checkpoints): a path
// that is a symlink is written through to its target, as a shell redirection would, instead of
// replacing the link; a path that exists and is not a regular file (a directory, a device such as
// /dev/full, a FIFO, a socket) is refused with an error that says what it is; and a command can
// check, before any long work, that the file can be created there. Used by AtomicFileWriter.
// Tested by tests/core/output_file_test.cpp.
#pragma once

#include <filesystem>
#include <string_view>

namespace dflash {

// The file that writing `path` should replace: `path` with every symlink along its final
// component followed (a dangling link gives the path it points to). Throws dflash::Error, naming
// `what` (e.g. "--json"), when that file exists and is not a regular file, or when the links loop.
std::filesystem::path resolve_output_file(const std::filesystem::path& path,
                                          std::string_view what = "the output file");

// resolve_output_file, then proves that the file can be written: its directory exists and a
// file can be created in it (a probe `<file>.tmp` is created and removed), and an existing file
// is writable. Returns the resolved path. Run it before long work whose result goes to `path`.
std::filesystem::path check_output_file(const std::filesystem::path& path,
                                        std::string_view what = "the output file");

// "a directory", "a character device", "a FIFO", ... for an existing non-regular file.
std::string_view file_kind(const std::filesystem::file_status& st);

}  // namespace dflash

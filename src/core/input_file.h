// Where an input file comes from (a --config TOML, tokenizer.json, a model's config.json, a
// prompts or data JSONL, a checkpoint index): the path must name a regular file once symlinks are
// followed. A directory, a device such as /dev/zero (endless bytes), a FIFO (whose open or read
// waits forever for a writer) or a socket is refused with an error that says what it is, as output
// paths are (output_file.h). A whole-file read has a size cap, so that a wrong file is refused
// instead of filling memory; line-by-line inputs (JSONL) are streamed with a cap per line instead,
// since a data file may rightly be far larger than memory. Errors name the file, what it is for
// and the cap. Tested by tests/core/input_file_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace dflash {

// Caps of the inputs, each far above the largest real file of its kind (config.json and indexes
// are kilobytes, the largest tokenizer.json files tens of megabytes) and far below what would
// exhaust a machine's memory.
inline constexpr uint64_t kMaxConfigFileBytes = uint64_t{16} << 20;  // settings TOML
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{64} << 20;    // config.json, indexes, ...
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{512} << 20;  // tokenizer.json & co.
inline constexpr uint64_t kMaxJsonlLineBytes = uint64_t{256} << 20;      // one JSONL record

// Opens `path` for reading and checks, on the opened file (so nothing can swap it in between), that
// it is a regular file; a FIFO does not block the open. Returns the descriptor (the caller closes
// it) and sets `size` to the file's size. Throws dflash::Error naming `what` (e.g. "prompts file")
// and the path when the file is missing, unreadable or not a regular file.
int open_input_file(const std::filesystem::path& path, std::string_view what, uint64_t& size);

// The whole of `path`, which must be a regular file of at most `max_bytes` bytes (a file that
// grows past the cap while it is read is refused too).
std::string read_input_file(const std::filesystem::path& path, uint64_t max_bytes,
                            std::string_view what);

// Reads a regular file line by line without holding more than one line: for JSONL, where a file may
// be larger than memory but a single line may not exceed `max_line_bytes`.
class InputLines {
  public:
    InputLines(const std::filesystem::path& path, uint64_t max_line_bytes, std::string_view what);
    ~InputLines();
    InputLines(const InputLines&) = delete;
    InputLines& operator=(const InputLines&) = delete;

    // The next line without its '\n' (a '\r' before it stays); false at the end of the file. A line
    // longer than the cap throws an error naming the file, the line number and the cap.
    bool next(std::string& line);
    int64_t line_number() const { return line_number_; }  // of the line `next` returned, 1-based
    uint64_t offset() const { return consumed_; }         // bytes up to the end of that line
    uint64_t file_bytes() const { return file_bytes_; }   // the file's size when it was opened
    const std::filesystem::path& path() const { return path_; }

  private:
    bool fill();  // reads more bytes into buf_; false at the end of the file

    std::filesystem::path path_;
    std::string what_;
    uint64_t max_line_bytes_;
    int fd_ = -1;
    uint64_t file_bytes_ = 0;
    std::string buf_;  // bytes read and not yet returned, from buf_pos_
    size_t buf_pos_ = 0;
    bool eof_ = false;
    int64_t line_number_ = 0;
    uint64_t consumed_ = 0;
};

// "12.0 MiB (12582912 bytes)": sizes in messages about caps.
std::string byte_size_text(uint64_t bytes);

}  // namespace dflash

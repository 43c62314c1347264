// Dataset shards (*.dfshard): tokenized samples with loss masks in one versioned, checksummed
// binary file. Layout in docs/data.md. A reader never returns partial or corrupt data: every
// problem is an Error naming the file, the byte offset and (where there is one) the sample.
// Tested by tests/data/shard_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace dflash {

inline constexpr char kShardMagic[8] = {'D', 'F', 'S', 'H', 'A', 'R', 'D', '\0'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr const char* kShardExtension = ".dfshard";
// Fixed part of the header before the tokenizer name (see docs/data.md).
inline constexpr uint64_t kShardFixedHeaderBytes = 48;
inline constexpr uint64_t kShardIndexEntryBytes = 24;

struct ShardInfo {
    uint32_t version = 0;
    int64_t num_samples = 0;
    int64_t num_tokens = 0;
    int64_t vocab_size = 0;
    std::string tokenizer;  // Tokenizer::name() of the tokenizer that made the ids
    // The index checksum: FNV-1a 64 over every sample's (start, length, checksum), so it stands
    // for the whole content. Datasets record it in manifest.json to tell one shard from another.
    uint64_t content_checksum = 0;
};

// Collects samples in memory and writes the shard on finish(): first to "<path>.tmp", then
// renamed, so a crash never leaves a half-written file under the real name.
class ShardWriter {
  public:
    ShardWriter(std::filesystem::path path, std::string tokenizer_name, int64_t vocab_size);
    // Ids must lie in [0, vocab_size), masks be 0/1, tokens and mask of equal, non-zero length.
    void add(const Encoded& sample);
    int64_t num_samples() const { return static_cast<int64_t>(lengths_.size()); }
    int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
    void finish();
    // After finish(): what a reader of the file will report (ShardInfo::content_checksum...).
    const ShardInfo& info() const { return info_; }

  private:
    std::filesystem::path path_;
    std::string tokenizer_;
    int64_t vocab_size_;
    bool finished_ = false;
    ShardInfo info_;                  // filled by finish()
    std::vector<uint64_t> lengths_;   // [num_samples]
    std::vector<int32_t> tokens_;     // [num_tokens]
    std::vector<uint8_t> loss_mask_;  // [num_tokens]
};

// Opens a shard, validates header and index (magic, version, checksums, sizes), and reads
// samples on demand with pread, so one reader may serve several threads at once.
class ShardReader {
  public:
    explicit ShardReader(std::filesystem::path path);
    ~ShardReader();
    ShardReader(ShardReader&& o) noexcept;
    ShardReader& operator=(ShardReader&& o) noexcept;
    ShardReader(const ShardReader&) = delete;
    ShardReader& operator=(const ShardReader&) = delete;

    const ShardInfo& info() const { return info_; }
    const std::filesystem::path& path() const { return path_; }
    int64_t num_samples() const { return info_.num_samples; }
    int64_t sample_length(int64_t i) const;
    // Reads sample i and checks its checksum, ids and mask values.
    Encoded read(int64_t i) const;
    // Reads every sample (what `dflash data verify` runs).
    void verify_all() const;

  private:
    void read_exact(uint64_t offset, void* dst, uint64_t n, const char* what) const;
    void load_header_and_index();
    void load_index(uint64_t header_bytes, uint64_t num_samples, uint64_t num_tokens);

    std::filesystem::path path_;
    int fd_ = -1;
    uint64_t file_bytes_ = 0;
    ShardInfo info_;
    uint64_t tokens_offset_ = 0;    // file offset of the token section
    uint64_t mask_offset_ = 0;      // file offset of the loss-mask section
    std::vector<uint64_t> starts_;  // [num_samples + 1] token offset of each sample
    std::vector<uint64_t> checks_;  // [num_samples] FNV-1a 64 of tokens then mask
};

// The shard files of a directory (*.dfshard), sorted by name.
std::vector<std::filesystem::path> list_shards(const std::filesystem::path& dir);

}  // namespace dflash

// HF-style checkpoint directories: either one `model.safetensors`, or shards
// `model-0000i-of-0000N.safetensors` listed by `model.safetensors.index.json`
// ({"metadata": {"total_size": bytes}, "weight_map": {tensor name: shard file}}). CheckpointReader
// presents the tensors of either layout under one name space; write_checkpoint writes one file or
// shards plus index, each file atomically. Tested by tests/core/safetensors_test.cpp.
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"

namespace dflash {

inline constexpr const char* kSingleCheckpointFile = "model.safetensors";
inline constexpr const char* kCheckpointIndexFile = "model.safetensors.index.json";

class CheckpointReader {
  public:
    // Opens `dir`/model.safetensors if present, else the shards named by
    // `dir`/model.safetensors.index.json. Missing shards and index entries that name tensors a
    // shard lacks are errors.
    static CheckpointReader open(const std::filesystem::path& dir);

    const std::filesystem::path& dir() const { return dir_; }
    bool sharded() const { return sharded_; }
    std::vector<std::string> names() const;  // sorted
    bool has(const std::string& name) const { return where_.count(name) != 0; }
    std::vector<int64_t> shape(const std::string& name) const;
    std::string dtype(const std::string& name) const;  // safetensors spelling ("BF16", ...)
    // Refuses NaN and infinite values, naming the tensor (SafetensorsFile::read_f32).
    HostTensor read_f32(const std::string& name) const;
    HostTensor read(const std::string& name) const;  // i32 stays i32
    SafetensorsFile::NonFinite nonfinite(const std::string& name) const;
    // The file that holds a tensor (model.safetensors or one shard), for errors that name it.
    std::filesystem::path file_path(const std::string& name) const;
    // A tensor's stored bytes as they are, in any dtype (MXFP4 expert blocks and scales are U8).
    std::span<const unsigned char> raw_bytes(const std::string& name) const;
    // The files behind the names (one, or every shard).
    std::vector<std::filesystem::path> files() const;

  private:
    const SafetensorsFile& file_of(const std::string& name) const;

    std::filesystem::path dir_;
    bool sharded_ = false;
    std::vector<SafetensorsFile> files_;
    std::map<std::string, size_t> where_;  // tensor name -> index into files_
};

// Writes `tensors` into `dir` (created if needed). Float tensors are stored as `store_as`
// (f32 or bf16), i32 as I32. When the stored total exceeds `max_shard_bytes` the tensors are split,
// in order, into shards of at most that size (a single larger tensor gets a shard of its own) and
// an index is written last; otherwise one model.safetensors. Leftovers of the other layout (a
// stale index, stale shards, a stale single file) are removed so a reader never sees both. Every
// file carries metadata {"format": "pt"}, which HF transformers requires.
void write_checkpoint(const std::filesystem::path& dir,
                      const std::vector<std::pair<std::string, Tensor>>& tensors, DType store_as,
                      size_t max_shard_bytes);

// Reads a JSON file with errors that name the file and where parsing failed.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace dflash

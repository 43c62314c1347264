// manifest.json, the truth about a dataset directory (docs/data.md): the tokenizer, the counts,
// and every shard file with its sample and token counts and content checksum. `dflash data
// prepare` and `data regenerate` write it last; `dflash data verify` checks the directory against
// it (a deleted, added, swapped or corrupt shard, a missing or corrupt manifest all fail), and
// ShardedDataset::open refuses a directory whose shard files disagree with it.
// Tested by tests/data/manifest_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/shard.h"

namespace dflash {

inline constexpr const char* kManifestFile = "manifest.json";

struct ManifestShard {
    std::string file;  // name inside the dataset directory
    int64_t samples = 0;
    int64_t tokens = 0;
    uint64_t content_checksum = 0;  // ShardInfo::content_checksum
};

struct DatasetManifest {
    std::string tokenizer;
    int64_t vocab_size = 0;
    std::vector<std::string> inputs;  // what the samples were made from
    int64_t records = 0;              // input records read
    int64_t samples = 0;
    int64_t tokens = 0;
    int64_t response_tokens = 0;  // tokens with loss mask 1
    int64_t skipped = 0;          // records without anything to train on
    std::vector<ManifestShard> shards;

    // The entry of a finished shard (its counts and checksum).
    void add_shard(const std::filesystem::path& file, const ShardInfo& info);
    nlohmann::json to_json() const;
    // `source` names the file in errors; every field is checked for presence and type.
    static DatasetManifest from_json(const nlohmann::json& j, const std::string& source);
};

// Writes dir/manifest.json atomically.
void write_manifest(const std::filesystem::path& dir, const DatasetManifest& m);
// Reads dir/manifest.json; a missing or malformed file is an error that says so.
DatasetManifest read_manifest(const std::filesystem::path& dir);

// The shard files of `dir` that the manifest does not list, and the listed ones that are not
// there: a directory that can be trained on has neither. Reads no shard.
std::vector<std::string> manifest_file_problems(const std::filesystem::path& dir,
                                                const DatasetManifest& m);

// What `dflash data verify` found.
struct DatasetCheck {
    DatasetManifest manifest;           // as read (empty when it could not be)
    int64_t response_tokens = 0;        // counted from the samples
    std::vector<std::string> problems;  // each a full sentence; empty when sound
    bool ok() const { return problems.empty(); }
};

// Every check of `dir` against its manifest: the manifest reads; the shard files are exactly the
// listed ones; each shard opens, matches its entry (tokenizer, vocabulary, samples, tokens,
// checksum) and has every sample intact; the totals match. Collects every problem.
DatasetCheck verify_dataset(const std::filesystem::path& dir);

}  // namespace dflash

// `dflash data prepare` as a library function: JSONL files -> tokenized shards in a directory.
// Tested by tests/data/prepare_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/logging.h"
#include "tokenizer/tokenizer.h"

namespace dflash {

struct PrepareOptions {
    std::vector<std::filesystem::path> inputs;  // JSONL files, read in this order
    std::filesystem::path output_dir;           // created if missing
    int64_t samples_per_shard = 10000;
    // Replace a dataset already in output_dir (otherwise its presence is an error, so two
    // datasets are never mixed by accident). The old one stays intact until the new one is
    // complete.
    bool overwrite = false;
    double progress_interval_s = 2.0;  // seconds between progress lines (info level)
};

struct PrepareStats {
    int64_t records = 0;          // non-empty JSONL lines read
    int64_t samples = 0;          // samples written
    int64_t tokens = 0;           // tokens written
    int64_t response_tokens = 0;  // tokens with loss_mask 1
    int64_t skipped = 0;          // records with nothing to train on (no anchor candidate)
    int64_t shards = 0;
};

// Tokenizes every record, skips those without two consecutive response tokens (no anchor could
// be drawn from them), and writes shards named shard-00000.dfshard, ... plus manifest.json
// (data/manifest.h). The output directory is locked against other writers, and the dataset is
// built in a staging sibling that replaces the directory only when complete (core/staged_dir.h):
// an error or Ctrl-C leaves whatever was there before untouched.
PrepareStats prepare_dataset(const PrepareOptions& opt, const Tokenizer& tok, const Logger& log);

}  // namespace dflash

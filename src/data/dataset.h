// ShardedDataset: the samples of every *.dfshard in a directory, as one indexed collection.
// PackedLoader: the training sequences one worker reads — shuffled per epoch, packed, split
// across workers — with a two-integer state that makes a resumed run read exactly the sequences an
// uninterrupted one would. Tested by tests/data/dataset_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "data/shard.h"

namespace dflash {

class ShardedDataset {
  public:
    // All *.dfshard files of `dir`, sorted by name. They must share one tokenizer and vocabulary;
    // where `dir` has a manifest.json, they must be exactly the shards it lists.
    static ShardedDataset open(const std::filesystem::path& dir);

    int64_t num_samples() const { return offsets_.empty() ? 0 : offsets_.back(); }
    int64_t num_tokens() const { return num_tokens_; }
    int64_t num_shards() const { return static_cast<int64_t>(shards_.size()); }
    // The shard files, in the order their samples are numbered (what identifies the data).
    const std::vector<ShardReader>& shards() const { return shards_; }
    const std::string& tokenizer_name() const { return tokenizer_; }
    int64_t vocab_size() const { return vocab_size_; }
    // Length in tokens, from the index (no read).
    int64_t sample_length(int64_t i) const;
    // Reads and verifies sample i. Safe to call from several threads at once.
    Encoded sample(int64_t i) const;

  private:
    std::pair<size_t, int64_t> locate(int64_t i) const;

    std::vector<ShardReader> shards_;
    std::vector<int64_t> offsets_;  // [num_shards + 1] first global sample index of each shard
    int64_t num_tokens_ = 0;
    std::string tokenizer_;
    int64_t vocab_size_ = 0;
};

// One training sequence: whole samples concatenated (or one sample when packing is off).
struct Sequence {
    std::vector<int32_t> tokens;         // [S], S <= max_length
    std::vector<uint8_t> loss_mask;      // [S]
    std::vector<int32_t> sample_starts;  // offset of each packed sample in `tokens` (first is 0)
};

// Where a loader stands: the next sequence is number `cursor` of this worker's part of `epoch`.
struct LoaderState {
    int64_t epoch = 0;
    int64_t cursor = 0;
    bool operator==(const LoaderState&) const = default;
};
nlohmann::json loader_state_to_json(const LoaderState& s);
LoaderState loader_state_from_json(const nlohmann::json& j);

struct LoaderOptions {
    int64_t max_length = 2048;  // tokens per sequence; longer samples are truncated
    bool packing = true;        // concatenate whole samples up to max_length
    uint64_t seed = 0;          // the shuffle of epoch e depends on (seed, e) only
    bool shuffle = true;        // false: every epoch reads the samples in dataset order
    int64_t rank = 0;           // this worker
    int64_t world = 1;          // number of workers
    // Every worker must take the same number of steps. When an epoch's sequences do not divide
    // evenly, drop_last=false repeats the first few sequences of the epoch to fill the last
    // round (like PyTorch's DistributedSampler); drop_last=true drops the remainder.
    bool drop_last = false;
};

// Note [Loader plan]: each epoch, the sample order is shuffled from (seed, epoch); the whole
// order is packed greedily into sequences using only the index lengths (no data is read); global
// sequence g goes to worker g % world. Every worker computes the same plan, so all of them agree
// on the number of steps, and each reads only its own samples from disk.
class PackedLoader {
  public:
    PackedLoader(const ShardedDataset& ds, LoaderOptions opt);

    // The next sequence of this worker; after the last one of an epoch, the next epoch begins.
    Sequence next();

    LoaderState state() const { return state_; }
    void set_state(LoaderState s);

    // Sequences this worker reads in the current epoch (the number of steps of the epoch; the
    // same on every worker). With packing it can differ slightly between epochs, because the
    // packing depends on the shuffle; total_sequences() sums the exact counts for a schedule.
    int64_t sequences_per_epoch() const { return per_worker_; }
    int64_t sequences_in_epoch(int64_t epoch) const;
    int64_t total_sequences(int64_t num_epochs) const;

    // The global sample indices of this worker's sequence `cursor` in `epoch` (no data read).
    std::vector<int64_t> sequence_samples(int64_t epoch, int64_t cursor) const;
    const LoaderOptions& options() const { return opt_; }

  private:
    struct Plan {
        std::vector<int64_t> order;      // shuffled global sample indices
        std::vector<int64_t> seq_begin;  // [num_sequences + 1] ranges into `order`
        int64_t per_worker = 0;
    };
    Plan make_plan(int64_t epoch) const;
    int64_t global_sequence(const Plan& p, int64_t cursor) const;
    void load_epoch(int64_t epoch);

    const ShardedDataset& ds_;
    LoaderOptions opt_;
    LoaderState state_;
    Plan plan_;  // of state_.epoch
    int64_t per_worker_ = 0;
};

}  // namespace dflash

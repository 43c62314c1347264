// Training checkpoints (docs/design.md "Errors", nothing is lost): <run>/checkpoint-<step>/ holds
// the model in its HF layout (written by the caller) plus training_state.safetensors (fp32 master
// weights and AdamW moments of every parameter) and training_state.json (step, epoch, every
// worker's loader state, seeds, the settings dump and hash, format version), and settings.toml. A
// checkpoint is written into a temporary directory and renamed; <run>/latest names the newest and
// is replaced atomically. Tested by tests/train/checkpoint_test.cpp and, for damaged checkpoints,
// tests/train/resume_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "model/params.h"
#include "train/optimizer.h"

namespace dflash::train {

inline constexpr int kTrainingStateVersion = 1;
inline constexpr const char* kTrainingStateJson = "training_state.json";
inline constexpr const char* kTrainingStateTensors = "training_state.safetensors";
inline constexpr const char* kLatestFile = "latest";
inline constexpr const char* kRunSettingsFile = "settings.toml";

// Which data a run trains on: recorded in training_state.json and compared on resume, since the
// data positions a checkpoint records mean something only in the data they were taken in. The
// digest is content-based, so a moved or copied dataset is the same data.
struct DatasetIdentity {
    // 16 hex digits: FNV-1a 64 over the tokenizer, the vocabulary and every shard's sample and
    // token counts and content checksum (ShardInfo::content_checksum), in order.
    std::string digest;
    std::string path;  // the directory it was read from (for messages)
    int64_t samples = 0;
    int64_t tokens = 0;
    int64_t shards = 0;
    // "DIR (24 samples, 672 tokens in 1 shard(s), digest 0123456789abcdef)"
    std::string describe() const;
};
DatasetIdentity dataset_identity(const ShardedDataset& ds);

struct TrainingState {
    std::string kind;  // "drafter" or "target": what the checkpoint trains
    int64_t step = 0;  // optimizer steps done
    int64_t total_steps = 0;
    int64_t epoch = 0;
    std::vector<LoaderState> loaders;  // [workers], worker r's next sequence
    uint64_t seed = 0;                 // runtime.seed: init, data order, anchors
    // Anchors are drawn from Rng(anchor_seed).fork(epoch).fork(global sequence index), so no
    // generator state advances between steps; the seeds are all that a resume needs.
    uint64_t anchor_seed = 0;
    std::string settings_toml;  // config::dump_toml of the run's settings
    std::string settings_hash;
    // The training data; absent in checkpoints of dflash versions that did not record it.
    std::optional<DatasetIdentity> data;
};

nlohmann::json training_state_to_json(const TrainingState& s);
TrainingState training_state_from_json(const nlohmann::json& j);  // errors name the bad field

// "checkpoint-000120" style names sort by step; the number is zero-padded to 6 digits.
std::string checkpoint_name(int64_t step);

// Writes <run_dir>/checkpoint-<step>: save_model(dir) writes the model files first, then the
// training state (params' f32 masters and the AdamW moments m, v: every one, f32 [numel] on the
// host, gathered from the workers when the optimizer state is sharded); the directory is renamed
// into place and <run_dir>/latest updated. A checkpoint of the same step left by an earlier run
// is replaced. Returns the final directory.
std::filesystem::path write_checkpoint(
    const std::filesystem::path& run_dir, const TrainingState& state, const ParamSet& params,
    const Tensor& m, const Tensor& v,
    const std::function<void(const std::filesystem::path&)>& save_model);

// Reads training_state.json of a checkpoint directory.
TrainingState read_training_state(const std::filesystem::path& checkpoint_dir);
// Overwrites params' values and opt's moments (those of opt.shard()) and step count from a
// checkpoint's training_state.safetensors; every tensor must be present with its shape.
void load_optimizer_state(const std::filesystem::path& checkpoint_dir, int64_t optimizer_steps,
                          ParamSet& params, AdamW& opt);

// Checks that training_state.safetensors holds the fp32 master, adam_m and adam_v of every tensor
// of the checkpoint's model files, with their shapes, and that every value is finite (one pass
// over the file): what load_optimizer_state will need, found before a resume changes anything.
// Errors name the file and the first few problems.
void check_training_state_files(const std::filesystem::path& checkpoint_dir);

// What `dflash inspect` reports of a checkpoint directory's training state, appended to `text`:
// training_state.json's kind, step, epoch, data positions and training data;
// training_state.safetensors' tensors and, with check_values, whether every value is finite.
// Each problem found (an unreadable file, non-finite values) is added to `problems`.
void describe_training_state(const std::filesystem::path& checkpoint_dir, bool check_values,
                             std::string& text, std::vector<std::string>& problems);

// The checkpoint named by <run_dir>/latest, if any.
std::optional<std::filesystem::path> latest_checkpoint(const std::filesystem::path& run_dir);
// `--resume DIR`: a checkpoint directory, or a run directory (its latest checkpoint).
std::filesystem::path resolve_resume_dir(const std::filesystem::path& dir);

}  // namespace dflash::train

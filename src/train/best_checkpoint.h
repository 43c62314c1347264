// The best evaluation's checkpoint (train.keep_best, docs/training.md "The best checkpoint"):
// <run>/best/ is a run directory of its own holding one checkpoint, checkpoint-<step>/ (a full
// one: model files and training state, so `--resume <run>/best` works), its `latest` file and
// best.json {metric, value, step}. It lives outside <run>'s checkpoint-<step> series, so nothing
// that prunes that series touches it, and a resumed run reads best.json to keep knowing the value
// to beat. Tested by tests/train/best_checkpoint_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include "model/params.h"
#include "train/checkpoint.h"

namespace dflash::train {

inline constexpr const char* kBestDir = "best";
inline constexpr const char* kBestJson = "best.json";

struct BestRecord {
    std::string metric;  // train.best_metric
    double value = 0;
    int64_t step = 0;
};

// <run_dir>/best/best.json, or nullopt when there is none. A file that does not parse is an error
// naming it.
std::optional<BestRecord> read_best(const std::filesystem::path& run_dir);

// Writes the checkpoint of `state` into <run_dir>/best/ (write_checkpoint), replaces best.json
// (atomically), then removes the earlier best checkpoint: a crash in between leaves a spare
// directory, never a best.json naming a missing checkpoint. Returns the checkpoint's directory.
std::filesystem::path write_best(
    const std::filesystem::path& run_dir, const BestRecord& best, const TrainingState& state,
    const ParamSet& params, const Tensor& m, const Tensor& v,
    const std::function<void(const std::filesystem::path&)>& save_model);

}  // namespace dflash::train

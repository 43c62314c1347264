// The preamble every training command runs before it loads a model, in this order (shared by
// run_drafter_training and run_pretraining):
//   resume    the checkpoint `--resume` names (a run directory: its latest checkpoint);
//   settings  that checkpoint's settings layered under the given ones (settings_for_resume: an
//             explicit setting wins, a model-shape change is refused), then typed (RunSettings);
//   run dir   --output, else the resumed run's directory, else the command's output_dir;
//   lock      the run directory locked, so a second writer is refused before minutes of loading;
//   datasets  the training data and the held-out data opened.
// run_trainer then validates a resume completely against them before it writes anything.
// Tested by tests/train/resume_test.cpp, checkpoint_test.cpp and pretrain_test.cpp.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "config/settings.h"
#include "core/dir_lock.h"
#include "core/logging.h"
#include "data/dataset.h"
#include "train/train_options.h"
#include "train/trainer.h"

namespace dflash::train {

// The settings as the trainer receives them: the snapshot, to record it (settings.toml and every
// checkpoint) and to layer a resumed checkpoint's settings under it, and the function that types
// a snapshot (training_options_from_settings, src/options/training.h), run again on the layered
// one. Nothing in src/train reads a setting by key.
struct RunSettings {
    const config::Settings& given;
    std::function<TrainingOptions(const config::Settings&)> read;
};

// What a training command asks for.
struct RunRequest {
    std::string kind;  // "drafter" or "target"
    std::filesystem::path data_dir;
    std::filesystem::path eval_data_dir;  // empty: train.eval_data
    std::filesystem::path output_dir;     // empty: the resumed run's, else the command's setting
    std::filesystem::path resume;         // empty: a fresh run
    // The settings a resume cannot change (settings_for_resume), as the weights fix them.
    std::vector<std::string> shape_keys;
};

// A run after its preamble; it keeps the lock and the datasets for the run's life.
class TrainingRun {
  public:
    TrainingRun(const RunRequest& request, const RunSettings& settings, const Logger& log);
    TrainingRun(const TrainingRun&) = delete;
    TrainingRun& operator=(const TrainingRun&) = delete;

    // The run's settings: the given ones, or for a resume the checkpoint's layered under them.
    const config::Settings& settings() const { return settings_; }
    const TrainingOptions& options() const { return options_; }
    const std::optional<std::filesystem::path>& resume_from() const { return resume_from_; }
    const ShardedDataset& train_data() const { return *train_; }

    // The trainer's spec with all the preamble knows (kind, data, the run's length from train.*
    // or, for a target, pretrain.*, run directory and lock, resume); the caller adds the task.
    TrainerSpec spec(const TrainHooks& hooks) const;
    // run_trainer with this run's options and settings.
    TrainSummary train(const TrainerSpec& spec, const Logger& log) const;

  private:
    std::string kind_;
    std::optional<std::filesystem::path> resume_from_;
    config::Settings settings_;
    TrainingOptions options_;
    std::filesystem::path run_dir_;
    std::optional<DirLock> lock_;
    std::optional<ShardedDataset> train_;
    std::optional<ShardedDataset> eval_;
};

}  // namespace dflash::train

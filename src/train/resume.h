// Resuming a run from a checkpoint (design "Errors": a refused resume changes nothing): the
// settings a resumed run uses, and the checks that a checkpoint can continue in this run (what it
// trains, its step, every worker's data position in this data, its training-state tensors), made
// before anything in the run directory changes. Tested by tests/train/resume_test.cpp,
// checkpoint_test.cpp, pretrain_test.cpp and trainer_test.cpp.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "config/settings.h"
#include "core/logging.h"
#include "data/dataset.h"
#include "train/checkpoint.h"
#include "train/loop_options.h"

namespace dflash::train {

// The settings a resumed run uses, so that `--resume` alone continues the run it names
// (docs/training.md): the checkpoint's own settings, except keys the user set explicitly (config
// file, environment, command line), which win and are logged. An explicit value for a model-shape
// key that differs from the checkpoint's is refused, naming every such key: `shape_keys` lists them
// (an entry ending in '.' covers a namespace, "drafter."), as the checkpoint's weights fix them.
config::Settings settings_for_resume(const config::Settings& given,
                                     const std::filesystem::path& checkpoint_dir,
                                     const std::vector<std::string>& shape_keys, const Logger& log);

// What a checkpoint is resumed into: the command's kind ("drafter" or "target"), its training
// data with the sequence length, and the checkpoint directory.
struct ResumeTarget {
    std::string kind;
    const ShardedDataset* train_data = nullptr;
    int64_t max_length = 0;
    std::filesystem::path checkpoint_dir;
};

// Checks that the checkpoint `rs` (read from spec.checkpoint_dir) can continue in a run of
// `total` steps with these options: what it trains, its step, every worker's data position
// (with another number of workers: where they all continue, which must exist exactly) and its
// training-state tensors. Returns each worker's data position [o.world].
std::vector<LoaderState> check_resume(const TrainingState& rs, const ResumeTarget& spec,
                                      const LoopOptions& o, int64_t total, const Logger& log);

}  // namespace dflash::train

// The training commands' settings edge: every namespace `dflash train` and `dflash pretrain` read
// (runtime, cuda_graphs, launch, train, pretrain, drafter, data, chat, infer), typed at once from a
// snapshot, and the two commands run from a snapshot, which the trainer records and, for a resume,
// layers under the checkpoint's before it types the result again with the same function.
// Tested by tests/options/options_test.cpp and every training test (tests/train/).
#pragma once

#include "config/settings.h"
#include "core/logging.h"
#include "train/drafter_training.h"
#include "train/pretraining.h"
#include "train/train_options.h"

namespace dflash {

train::TrainingOptions training_options_from_settings(const config::Settings& s);

// train::run_drafter_training / run_pretraining with `settings` typed by
// training_options_from_settings.
train::TrainSummary train_drafter_from_settings(const train::DrafterTrainJob& job,
                                                const config::Settings& settings,
                                                const Logger& log);
train::TrainSummary pretrain_from_settings(const train::PretrainJob& job,
                                           const config::Settings& settings, const Logger& log);

}  // namespace dflash

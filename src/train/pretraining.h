// `dflash pretrain` as a library function: a small Qwen3-architecture target trained from scratch
// with next-token loss on a tokenized dataset, using the data-parallel loop of trainer.h.
// Checkpoints are HF Qwen3 model directories (TargetModel::save) plus the training state.
// Tested by tests/train/pretrain_test.cpp.
#pragma once

#include <filesystem>

#include "core/logging.h"
#include "model/hf_config.h"
#include "tokenizer/tokenizer.h"
#include "train/train_options.h"
#include "train/trainer.h"
#include "train/training_run.h"

namespace dflash::train {

struct PretrainJob {
    std::filesystem::path data_dir;       // *.dfshard training data
    std::filesystem::path eval_data_dir;  // empty: train.eval_data (empty too: no evaluation)
    // Empty: the run directory of `resume` when resuming, else pretrain.output_dir.
    std::filesystem::path output_dir;
    std::filesystem::path resume;  // a checkpoint or run directory; empty: a fresh run
    TrainHooks hooks;
};

// `settings.read` types the run's settings (src/options/training.h passes
// training_options_from_settings; pretrain_from_settings there is the whole call).
TrainSummary run_pretraining(const PretrainJob& job, const RunSettings& settings,
                             const Logger& log);

// The target a pretraining run builds: the pretrain.architecture layout (qwen3, or llama: no q/k
// norm) with the pretrain.* dims, RoPE (theta, optional llama3 scaling) and embedding tying, the
// tokenizer's vocabulary (and the data's, if larger) rounded up to a multiple of 8, its bos/eos
// ids.
TargetConfig pretrain_target_config(const PretrainOptions& pretrain, const Tokenizer& tok,
                                    int64_t data_vocab);

}  // namespace dflash::train

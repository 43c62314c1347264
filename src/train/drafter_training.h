// `dflash train` as a library function: a DFlash drafter trained for a frozen target on a
// tokenized dataset (docs/training.md "The drafter's training forward"), with the data-parallel
// loop of trainer.h. The target is loaded once and shared read-only by every worker; each worker
// owns its drafter replica. Evaluations can also decode held-out prompts speculatively with the
// current weights (real tau). Tested by tests/train/trainer_test.cpp,
// tests/train/checkpoint_test.cpp and tests/train/eval_decode_test.cpp.
#pragma once

#include <filesystem>

#include "core/logging.h"
#include "model/drafter.h"
#include "model/target.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/train_options.h"
#include "train/trainer.h"
#include "train/training_run.h"

namespace dflash::train {

struct DrafterTrainJob {
    std::filesystem::path target_dir;     // HF target directory
    std::filesystem::path data_dir;       // *.dfshard training data
    std::filesystem::path eval_data_dir;  // empty: train.eval_data (empty too: no evaluation)
    // Prompts JSONL (infer/prompts.h) decoded at each evaluation; empty: train.eval_prompts
    // (empty too: evaluations do not decode).
    std::filesystem::path eval_prompts;
    // Empty: the run directory of `resume` when resuming, else train.output_dir.
    std::filesystem::path output_dir;
    std::filesystem::path resume;        // a checkpoint or run directory; empty: a fresh run
    std::filesystem::path init_drafter;  // start from this drafter instead of a random one
    TrainHooks hooks;
};

// `settings.read` types the run's settings (src/options/training.h passes
// training_options_from_settings; train_drafter_from_settings there is the whole call).
TrainSummary run_drafter_training(const DrafterTrainJob& job, const RunSettings& settings,
                                  const Logger& log);

// The drafter a fresh run starts from: initial_drafter_config, weights N(0, 0.02^2) seeded by
// `seed` (runtime.seed) through initial_drafter_seed (DrafterModel::random). A fresh training run
// draws the same weights on each worker's device.
DrafterModel make_initial_drafter(Backend& be, const TargetModel& target, const Tokenizer& tok,
                                  const DrafterOptions& drafter, uint64_t seed);
// Its config: make_drafter_config from the target's dims and the drafter.* settings (mask id -1 =
// the tokenizer's MASK; empty target_layer_ids = the default rule of model/hf_config.h with
// drafter.num_target_features ids, fewer for shallow targets), the DFlash2 version of it
// (dflash2_config) with drafter.architecture=dflash2.
DrafterConfig initial_drafter_config(const TargetConfig& target, const Tokenizer& tok,
                                     const DrafterOptions& drafter);
// The DrafterModel::randomize seed of a fresh run with runtime.seed `seed`.
uint64_t initial_drafter_seed(uint64_t seed);

// The DFlash2 version of `base` with the drafter.conv_* / selector_* options; full, bidirectional
// attention like the DFlash drafter it starts from, so that with its identity / neutral new
// modules (DrafterModel::from_dflash) it drafts exactly as that drafter.
DrafterConfig dflash2_config(const DrafterConfig& base, const DrafterOptions& drafter);
// The DSpark version of `base` with the drafter.markov_* / confidence_* options (the warm start
// of docs/training.md "DSpark drafters" and fresh DSpark drafters).
DrafterConfig dspark_config(const DrafterConfig& base, const DrafterOptions& drafter);
// drafter.layer_types and drafter.sliding_window into c (errors name the setting).
void apply_attention_layout(const DrafterOptions& d, DrafterConfig& c);

// The tokenizer of a training run: the target's (tokenizer.json or dflash_tokenizer.json), which
// must be the one the dataset was tokenized with. A target that names no tokenizer, or one dflash
// cannot read, is refused: nothing falls back to another tokenizer.
std::unique_ptr<Tokenizer> training_tokenizer(const std::filesystem::path& target_dir,
                                              const std::string& dataset_tokenizer,
                                              const ChatOptions& chat);

}  // namespace dflash::train

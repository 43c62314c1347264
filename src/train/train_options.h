// The typed settings of the training commands (docs/design.md "Settings"): the train.*,
// pretrain.*, drafter.* and data.* values, and TrainingOptions, everything `dflash train` and
// `dflash pretrain` read from their settings. Filled once per settings snapshot at the settings
// edge (src/options/: one file per namespace); nothing in src/train reads a setting by key.
// Tested by tests/options/options_test.cpp and, through the training runs, tests/train/.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/step_graph.h"
#include "comm/launch.h"
#include "infer/spec_decode.h"
#include "model/block_loss.h"
#include "tokenizer/chat_template.h"
#include "train/schedule.h"

namespace dflash::train {

// The train.* settings: the optimizer, schedule, batching, evaluation and checkpoint cadence of
// both training commands, and the drafter's loss.
struct TrainOptions {
    double lr = 6e-4;
    double warmup_ratio = 0.04;
    ScheduleKind schedule = ScheduleKind::cosine;
    double grad_clip = 1.0;
    double weight_decay = 0;
    double beta1 = 0.9;
    double beta2 = 0.95;
    double adam_eps = 1e-8;
    int64_t epochs = 6;
    int64_t max_steps = 0;  // 0: from epochs
    int64_t batch_size = 1;
    int64_t max_length = 3072;
    int64_t accumulation = 1;
    int64_t checkpoint_every = 1000;
    bool shard_optimizer_state = false;
    int64_t replica_check_every = 0;
    int64_t eval_every = 1000;
    int64_t log_every = 10;
    std::filesystem::path output_dir = "runs/drafter";
    std::filesystem::path eval_data;     // empty: no held-out data
    int64_t eval_sequences = 64;         // 0: all
    std::filesystem::path eval_prompts;  // empty: evaluations do not decode
    int64_t eval_prompt_count = 8;
    int64_t eval_max_new_tokens = 64;
    bool keep_best = false;                  // <run>/best/: the best evaluation's checkpoint
    std::string best_metric = "tau_greedy";  // tau_greedy | tau_prob
    int64_t lm_head_chunk = 8192;
    // The drafter's loss.
    int64_t num_anchors = 512;
    double loss_decay_gamma = 7.0;
    LossMix loss;  // train.loss
    LossWeighting loss_weighting = LossWeighting::decay;
    double dpace_alpha = 0.5;          // in (0, 1]
    std::string documents = "packed";  // packed | separate
    double selector_loss_alpha = 1.0;
    // train.optimizer: adamw, or muon for the 2-D weights (MuonConfig) with AdamW for the rest.
    std::string optimizer = "adamw";
    double muon_lr = 0;  // 0: 10 x lr
    double muon_weight_decay = 0.1;
    int64_t muon_ns_steps = 5;
    std::string muon_adjust_lr = "match_rms_adamw";  // match_rms_adamw | original
    // train.hidden_noise: U(-a, a) added to the target features the drafter reads (0: none).
    double hidden_noise = 0;
    bool recompute_layers = false;  // train.recompute_layers
};

// The pretrain.* settings: the small target `dflash pretrain` builds, and its run.
struct PretrainOptions {
    std::string architecture = "qwen3";  // qwen3 | llama
    std::string rope_scaling = "none";   // none | llama3
    double rope_theta = 10000.0;
    bool tie_word_embeddings = false;
    int64_t hidden_size = 256;
    int64_t num_layers = 4;
    int64_t num_heads = 4;
    int64_t num_kv_heads = 2;
    int64_t head_dim = 64;
    int64_t intermediate_size = 768;
    double lr = 3e-3;
    int64_t max_length = 256;
    int64_t epochs = 1;
    int64_t max_steps = 0;  // 0: from epochs
    bool loss_on_prompt = true;
    std::filesystem::path output_dir = "runs/target";
};

// The drafter.* settings: the drafter a fresh run (or `dflash init`) builds.
struct DrafterOptions {
    std::string architecture = "dflash";  // dflash | dflash2
    int64_t block_size = 16;
    int64_t num_layers = 1;
    std::vector<int64_t> target_layer_ids;  // empty: the default rule
    int64_t mask_token_id = -1;             // -1: from the tokenizer
    int64_t num_target_features = 5;
    int64_t conv_kernel_size = 2;  // DFlash2
    int64_t conv_group_size = 16;
    int64_t selector_rank = 256;
    int64_t selector_top_k = 16;
    // Per draft layer "full_attention" or "sliding_attention" (empty: all full), and the window
    // of the sliding ones (docs/training.md "Sliding-window drafter layers").
    std::vector<std::string> layer_types;
    int64_t sliding_window = 0;
};

// The data.* settings: how the loader orders and packs sequences.
struct DataOptions {
    bool shuffle = true;
    bool pack = true;
};

// Everything a training command reads from its settings, typed.
struct TrainingOptions {
    RuntimeOptions runtime;
    GraphOptions graphs;  // cuda_graphs.*
    Launch launch;        // launch.*
    TrainOptions train;
    PretrainOptions pretrain;
    DrafterOptions drafter;
    DataOptions data;
    ChatOptions chat;       // chat.*: the target's tokenizer
    GenerateOptions infer;  // infer.*: decoding evaluations take its draft precision
};

}  // namespace dflash::train

// The settings edge (src/options/): every key of each namespace a command reads reaches the typed
// options struct its one filling function makes (a key read anywhere else, or not at all, fails
// here), and the training commands' composite carries each namespace's options.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>

#include "config/registry.h"
#include "config/settings.h"
#include "core/error.h"
#include "options/chat_options.h"
#include "options/cuda_graphs_options.h"
#include "options/data_options.h"
#include "options/demo_options.h"
#include "options/drafter_options.h"
#include "options/infer_options.h"
#include "options/pretrain_options.h"
#include "options/runtime_options.h"
#include "options/train_options.h"
#include "options/training.h"

namespace dflash {
namespace {

std::shared_ptr<const config::Registry> registry() {
    return std::make_shared<const config::Registry>(config::make_registry());
}

// Every field, as text: two option structs describe alike exactly when their fields are equal.
std::string describe(const train::TrainOptions& o) {
    return fmt::format(
               "{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} "
               "{} {} {} "
               "{} {}",
               o.lr, o.warmup_ratio, static_cast<int>(o.schedule), o.grad_clip, o.weight_decay,
               o.beta1, o.beta2, o.adam_eps, o.epochs, o.max_steps, o.batch_size, o.max_length,
               o.accumulation, o.checkpoint_every, o.shard_optimizer_state, o.replica_check_every,
               o.eval_every, o.log_every, o.output_dir.string(), o.eval_data.string(),
               o.eval_sequences, o.eval_prompts.string(), o.eval_prompt_count,
               o.eval_max_new_tokens, o.lm_head_chunk, o.num_anchors, o.loss_decay_gamma,
               o.loss.name(), o.documents, o.selector_loss_alpha,
               static_cast<int>(o.loss_weighting), o.dpace_alpha) +
           fmt::format(" {} {} {} {} {} {} {} {} {}", o.optimizer, o.muon_lr, o.muon_weight_decay,
                       o.muon_ns_steps, o.muon_adjust_lr, o.hidden_noise, o.recompute_layers,
                       o.keep_best, o.best_metric) +
           fmt::format(" {} {} {}", o.dspark_ce_alpha, o.dspark_l1_alpha,
                       o.dspark_confidence_alpha);
}
std::string describe(const train::PretrainOptions& o) {
    return fmt::format("{} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}", o.architecture,
                       o.rope_scaling, o.rope_theta, o.tie_word_embeddings, o.hidden_size,
                       o.num_layers, o.num_heads, o.num_kv_heads, o.head_dim, o.intermediate_size,
                       o.lr, o.max_length, o.epochs, o.max_steps, o.loss_on_prompt,
                       o.output_dir.string());
}
std::string describe(const train::DrafterOptions& o) {
    return fmt::format("{} {} {} [{}] {} {} {} {} {} {}", o.architecture, o.block_size,
                       o.num_layers, fmt::join(o.target_layer_ids, ","), o.mask_token_id,
                       o.num_target_features, o.conv_kernel_size, o.conv_group_size,
                       o.selector_rank, o.selector_top_k) +
           fmt::format(" [{}] {}", fmt::join(o.layer_types, ","), o.sliding_window) +
           fmt::format(" {} {} {} {} {}", o.markov_rank, o.markov_head_type, o.confidence_head,
                       o.confidence_head_with_markov, o.dialect);
}
std::string describe(const train::DataOptions& o) {
    return fmt::format("{} {}", o.shuffle, o.pack);
}
std::string describe(const RuntimeOptions& o) {
    return fmt::format("{} {} {} [{}] {} {} {} {} {} {}", o.backend, o.threads, o.devices,
                       fmt::join(o.device_ids, ","), o.seed, o.log_level, o.gradient_exchange,
                       o.nccl_library, o.collective_timeout_s, o.gradient_bucket_mb);
}
std::string describe(const GraphOptions& o) {
    return fmt::format("{} {} {} {} {} {}", o.enabled, static_cast<int>(o.mode), o.warmup_runs,
                       o.max_rerecords, o.max_graphs, o.programmatic_launch);
}
std::string describe(const GenerateOptions& o) {
    return fmt::format("{} {} {} {} {} {} {} {} {} {} {} {}", o.sampling.temperature,
                       o.sampling.top_k, o.sampling.top_p, o.max_new_tokens, o.block_size,
                       o.max_context, o.draft_sampling, o.seed, static_cast<int>(o.draft_precision),
                       o.confidence_threshold, o.target_panels, o.fused_decode);
}
std::string describe(const ChatOptions& o) {
    return fmt::format("{} {} {} {} {} {}", o.template_name, o.enable_thinking, o.date_string,
                       o.reasoning_effort, o.current_date, o.model_identity);
}
std::string describe(const DemoDefaults& o) {
    return fmt::format("{} {}", o.output_dir.string(), o.quick);
}

// A valid value of `d` other than its default, in its command-line text form.
std::string other_value(const config::Declaration& d) {
    const config::Value& v = d.default_value;
    switch (d.type) {
        case config::Type::boolean:
            return std::get<bool>(v) ? "false" : "true";
        case config::Type::integer: {
            const int64_t x = std::get<int64_t>(v);
            return std::to_string(d.max && static_cast<double>(x + 1) > *d.max ? x - 1 : x + 1);
        }
        case config::Type::real: {
            const double x = std::get<double>(v);
            if (!d.max || x + 1 <= *d.max) return config::format_float(x + 1);
            const double lo = d.min ? *d.min : x - 1;
            return config::format_float(x > lo ? (x + lo) / 2 : (x + *d.max) / 2);
        }
        case config::Type::string:
            // train.loss is a string with a grammar (a weighted sum of loss kinds).
            if (d.key == "train.loss") return "0.5*" + std::get<std::string>(v) + "+kl";
            return std::get<std::string>(v) + "-other";
        case config::Type::enumeration:
            for (const auto& c : d.choices)
                if (c != std::get<std::string>(v)) return c;
            break;
        case config::Type::int_list:
            return "1,2";
        case config::Type::float_list:
            return "0.5";
        case config::Type::string_list:
            return "other";
    }
    ADD_FAILURE() << d.key << " has no other value";
    return "";
}

// Each key of namespace `ns`, set alone to another value, changes what `read` makes of the
// settings.
void expect_every_key_read(const std::string& ns,
                           const std::function<std::string(const config::Settings&)>& read) {
    const config::Settings base(registry());
    const std::string at_defaults = read(base);
    int keys = 0;
    for (const config::Declaration& d : base.registry().all()) {
        if (!d.key.starts_with(ns + ".")) continue;
        ++keys;
        const std::string v = other_value(d);
        EXPECT_NE(read(base.with_overrides({{d.key, v}})), at_defaults)
            << d.key << " = " << v << " does not reach the " << ns << ".* options";
    }
    EXPECT_GT(keys, 0) << ns;
}

TEST(Options, EveryTrainKeyIsReadIntoTrainOptions) {
    expect_every_key_read("train",
                          [](const auto& s) { return describe(train_options_from_settings(s)); });
}

TEST(Options, EveryPretrainKeyIsReadIntoPretrainOptions) {
    expect_every_key_read(
        "pretrain", [](const auto& s) { return describe(pretrain_options_from_settings(s)); });
}

TEST(Options, EveryDrafterKeyIsReadIntoDrafterOptions) {
    expect_every_key_read("drafter",
                          [](const auto& s) { return describe(drafter_options_from_settings(s)); });
}

TEST(Options, EveryDataKeyIsReadIntoDataOptions) {
    expect_every_key_read("data",
                          [](const auto& s) { return describe(data_options_from_settings(s)); });
}

TEST(Options, EveryRuntimeKeyIsReadIntoRuntimeOptions) {
    expect_every_key_read("runtime",
                          [](const auto& s) { return describe(runtime_options_from_settings(s)); });
}

TEST(Options, EveryCudaGraphsKeyIsReadIntoGraphOptions) {
    expect_every_key_read("cuda_graphs",
                          [](const auto& s) { return describe(graph_options_from_settings(s)); });
}

TEST(Options, EveryInferKeyIsReadIntoGenerateOptions) {
    expect_every_key_read(
        "infer", [](const auto& s) { return describe(generate_options_from_settings(s)); });
}

TEST(Options, EveryChatKeyIsReadIntoChatOptions) {
    expect_every_key_read("chat",
                          [](const auto& s) { return describe(chat_options_from_settings(s)); });
}

TEST(Options, EveryDemoKeyIsReadIntoDemoDefaults) {
    expect_every_key_read("demo",
                          [](const auto& s) { return describe(demo_defaults_from_settings(s)); });
}

TEST(Options, TrainingOptionsCarryEveryNamespace) {
    const config::Settings s = config::Settings(registry())
                                   .with_overrides({{"train.lr", "0.125"},
                                                    {"pretrain.num_layers", "3"},
                                                    {"drafter.block_size", "8"},
                                                    {"data.pack", "false"},
                                                    {"runtime.devices", "3"},
                                                    {"cuda_graphs.max_graphs", "7"},
                                                    {"chat.template", "qwen3"},
                                                    {"infer.cpu_draft_precision", "bf16"},
                                                    {"launch.world_size", "2"},
                                                    {"launch.rank", "1"}});
    const train::TrainingOptions o = training_options_from_settings(s);
    EXPECT_EQ(describe(o.train), describe(train_options_from_settings(s)));
    EXPECT_EQ(describe(o.pretrain), describe(pretrain_options_from_settings(s)));
    EXPECT_EQ(describe(o.drafter), describe(drafter_options_from_settings(s)));
    EXPECT_EQ(describe(o.data), describe(data_options_from_settings(s)));
    EXPECT_EQ(describe(o.runtime), describe(runtime_options_from_settings(s)));
    EXPECT_EQ(describe(o.graphs), describe(graph_options_from_settings(s)));
    EXPECT_EQ(describe(o.chat), describe(chat_options_from_settings(s)));
    EXPECT_EQ(describe(o.infer), describe(generate_options_from_settings(s)));
    EXPECT_EQ(o.train.lr, 0.125);
    EXPECT_EQ(o.runtime.devices, 3);
    EXPECT_EQ(o.launch.world, 2);
    EXPECT_EQ(o.launch.rank, 1);
}

// D-PACE weighs slots by the draft's probability of the data's token: with another loss, or an
// alpha of 0, the settings are refused naming the keys.
TEST(Options, DpaceNeedsCeAndAPositiveAlpha) {
    const config::Settings base(registry());
    const auto message = [&](std::vector<std::pair<std::string, std::string>> kv) {
        try {
            (void)train_options_from_settings(base.with_overrides(kv));
        } catch (const Error& e) {
            return std::string(e.what());
        }
        return std::string();
    };
    const std::string kl = message({{"train.loss_weighting", "dpace"}, {"train.loss", "kl"}});
    EXPECT_NE(kl.find("train.loss=ce"), std::string::npos) << kl;
    const std::string zero =
        message({{"train.loss_weighting", "dpace"}, {"train.dpace_alpha", "0"}});
    EXPECT_NE(zero.find("train.dpace_alpha"), std::string::npos) << zero;
    EXPECT_EQ(message({{"train.loss_weighting", "dpace"}}), "");
    EXPECT_EQ(message({{"train.loss", "kl"}, {"train.dpace_alpha", "0"}}), "");  // decay: unused
}

}  // namespace
}  // namespace dflash

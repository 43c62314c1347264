// The catalog of every dflash setting (src/config/settings_catalog.cpp): the keys, types and
// defaults other components rely on, and that each declaration is complete.
#include <gtest/gtest.h>

#include <memory>
#include <set>

#include "config/registry.h"
#include "config/settings.h"
#include "core/error.h"
#include "support/test_util.h"

namespace dflash::config {
namespace {

TEST(Catalog, EveryDeclarationIsComplete) {
    const Registry r = make_registry();
    EXPECT_GE(r.size(), 54u);  // the keys of the brief (DefaultsOfTheBrief)
    std::set<std::string> envs;
    for (const auto& d : r.all()) {
        EXPECT_FALSE(d.doc.empty()) << d.key;
        EXPECT_FALSE(d.readers.empty()) << d.key;
        EXPECT_NE(d.key.find('.'), std::string::npos) << d.key;
        EXPECT_TRUE(envs.insert(d.env_name()).second) << d.key;
        const bool numeric = d.type == Type::integer || d.type == Type::real ||
                             d.type == Type::int_list || d.type == Type::float_list;
        if (numeric) {
            EXPECT_TRUE(d.min.has_value()) << d.key << " has no lower bound";
        }
    }
}

TEST(Catalog, DefaultsOfTheBrief) {
    const Settings s(std::make_shared<const Registry>(make_registry()));
    EXPECT_EQ(s.get<int64_t>("runtime.devices"), 1);
    EXPECT_EQ(s.get<std::string>("runtime.backend"), "auto");
    EXPECT_EQ(s.get<int64_t>("runtime.threads"), 0);
    EXPECT_EQ(s.get<int64_t>("runtime.seed"), 42);
    EXPECT_EQ(s.get<std::string>("runtime.log_level"), "info");
    EXPECT_TRUE(s.get<bool>("cuda_graphs.enabled"));
    EXPECT_EQ(s.get<std::string>("cuda_graphs.capture_mode"), "thread_local");
    EXPECT_EQ(s.get<int64_t>("cuda_graphs.max_rerecords"), 3);
    EXPECT_EQ(s.get<int64_t>("cuda_graphs.warmup_runs"), 2);
    EXPECT_EQ(s.get<int64_t>("drafter.block_size"), 16);
    EXPECT_EQ(s.get<int64_t>("drafter.num_layers"), 1);
    EXPECT_TRUE(s.get<std::vector<int64_t>>("drafter.target_layer_ids").empty());
    EXPECT_EQ(s.get<int64_t>("drafter.mask_token_id"), -1);
    EXPECT_EQ(s.get<int64_t>("drafter.num_target_features"), 5);
    EXPECT_EQ(s.get<double>("train.lr"), 6e-4);
    EXPECT_EQ(s.get<double>("train.warmup_ratio"), 0.04);
    EXPECT_EQ(s.get<std::string>("train.schedule"), "cosine");
    EXPECT_EQ(s.get<int64_t>("train.epochs"), 6);
    EXPECT_EQ(s.get<int64_t>("train.max_steps"), 0);
    EXPECT_EQ(s.get<int64_t>("train.batch_size"), 1);
    EXPECT_EQ(s.get<int64_t>("train.max_length"), 3072);
    EXPECT_EQ(s.get<int64_t>("train.num_anchors"), 512);
    EXPECT_EQ(s.get<double>("train.loss_decay_gamma"), 7.0);
    EXPECT_EQ(s.get<double>("train.grad_clip"), 1.0);
    EXPECT_EQ(s.get<double>("train.weight_decay"), 0.0);
    EXPECT_EQ(s.get<double>("train.beta1"), 0.9);
    EXPECT_EQ(s.get<double>("train.beta2"), 0.95);
    EXPECT_EQ(s.get<double>("train.adam_eps"), 1e-8);
    EXPECT_EQ(s.get<int64_t>("train.accumulation"), 1);
    EXPECT_EQ(s.get<int64_t>("train.checkpoint_every"), 1000);
    EXPECT_EQ(s.get<int64_t>("train.eval_every"), 1000);
    EXPECT_EQ(s.get<int64_t>("train.log_every"), 10);
    EXPECT_EQ(s.get<std::string>("train.output_dir"), "runs/drafter");
    EXPECT_EQ(s.get<int64_t>("train.lm_head_chunk"), 8192);
    EXPECT_EQ(s.get<double>("pretrain.lr"), 3e-3);
    EXPECT_EQ(s.get<int64_t>("pretrain.hidden_size"), 256);
    EXPECT_EQ(s.get<int64_t>("pretrain.num_layers"), 4);
    EXPECT_EQ(s.get<int64_t>("pretrain.num_heads"), 4);
    EXPECT_EQ(s.get<int64_t>("pretrain.num_kv_heads"), 2);
    EXPECT_EQ(s.get<int64_t>("pretrain.head_dim"), 64);
    EXPECT_EQ(s.get<int64_t>("pretrain.intermediate_size"), 768);
    EXPECT_EQ(s.get<int64_t>("pretrain.max_length"), 256);
    EXPECT_EQ(s.get<std::string>("pretrain.output_dir"), "runs/target");
    EXPECT_EQ(s.get<double>("infer.temperature"), 0.0);
    EXPECT_EQ(s.get<int64_t>("infer.top_k"), 0);
    EXPECT_EQ(s.get<double>("infer.top_p"), 1.0);
    EXPECT_EQ(s.get<int64_t>("infer.max_new_tokens"), 256);
    EXPECT_EQ(s.get<int64_t>("infer.block_size"), 0);
    EXPECT_FALSE(s.get<bool>("infer.draft_sampling"));
    EXPECT_EQ(s.get<int64_t>("infer.seed"), 0);
    EXPECT_TRUE(s.get<bool>("data.shuffle"));
    EXPECT_TRUE(s.get<bool>("data.pack"));
    EXPECT_FALSE(s.get<bool>("demo.quick"));
    EXPECT_EQ(s.get<std::string>("demo.output_dir"), "dflash-demo");
}

TEST(Catalog, SomeRangesAndChoices) {
    const Settings s(std::make_shared<const Registry>(make_registry()));
    EXPECT_THROW(s.with_overrides({{"drafter.num_layers", "0"}}), Error);
    EXPECT_THROW(s.with_overrides({{"runtime.devices", "0"}}), Error);
    EXPECT_THROW(s.with_overrides({{"runtime.backend", "tpu"}}), Error);
    EXPECT_THROW(s.with_overrides({{"cuda_graphs.capture_mode", "threadlocal"}}), Error);
    EXPECT_THROW(s.with_overrides({{"train.warmup_ratio", "1.5"}}), Error);
    EXPECT_THROW(s.with_overrides({{"infer.top_p", "-0.1"}}), Error);
    // top_p 0 passed the declared range and then failed the sampler's internal check: the
    // declaration now says what the samplers take, so the setting is refused with its own name.
    const std::string top_p = dflash::test::error_of([&] {
        s.with_overrides({{"infer.top_p", "0"}});
    });
    EXPECT_TRUE(dflash::test::has(top_p, "setting `infer.top_p` = 0")) << top_p;
    EXPECT_TRUE(dflash::test::has(top_p, "[1e-06, 1]")) << top_p;
    EXPECT_NO_THROW(s.with_overrides({{"infer.top_p", "1e-6"}, {"infer.temperature", "1"}}));
    EXPECT_NO_THROW(s.with_overrides({{"drafter.target_layer_ids", "1,9,17,25,33"},
                                      {"runtime.log_level", "debug"},
                                      {"train.schedule", "linear"}}));
}

}  // namespace
}  // namespace dflash::config

// The immutable Settings snapshot: typed getters, sources, defaults, hash, overrides
// (src/config/settings.h).
#include "config/settings.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <set>

#include "config/test_registry.h"
#include "core/error.h"

namespace dflash::config {
namespace {

TEST(Settings, DefaultsAndTypedGetters) {
    Settings s(test::small_registry());
    EXPECT_EQ(s.get<bool>("cuda_graphs.enabled"), true);
    EXPECT_EQ(s.get<std::string>("cuda_graphs.capture_mode"), "thread_local");  // enum
    EXPECT_EQ(s.get<int64_t>("train.epochs"), 6);
    EXPECT_EQ(s.get<double>("train.lr"), 6e-4);
    EXPECT_EQ(s.get<std::string>("train.output_dir"), "runs/drafter");
    EXPECT_EQ(s.get<std::vector<int64_t>>("drafter.target_layer_ids"), std::vector<int64_t>{});
    EXPECT_EQ(s.get<std::vector<double>>("train.betas"), (std::vector<double>{0.9, 0.95}));
    EXPECT_EQ(s.get<std::vector<std::string>>("data.files"), std::vector<std::string>{"a.jsonl"});
    EXPECT_EQ(s.source("train.lr"), "default");
    EXPECT_TRUE(s.is_default("train.lr"));
}

TEST(Settings, WrongTypeOrUnknownKeyThrows) {
    Settings s(test::small_registry());
    try {
        s.get<int64_t>("train.lr");
        FAIL() << "no error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("train.lr"), std::string::npos) << msg;
        EXPECT_NE(msg.find("get<double>"), std::string::npos) << msg;
    }
    EXPECT_THROW(s.get<bool>("train.epochs"), Error);
    EXPECT_THROW(s.get<double>("train.epochs"), Error);  // no silent int -> double
    EXPECT_THROW(s.get<std::vector<double>>("drafter.target_layer_ids"), Error);
    try {
        s.get<bool>("cuda_graphs.enabld");
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("`cuda_graphs.enabled`"), std::string::npos);
    }
    EXPECT_THROW(s.source("nope.nope"), Error);
    EXPECT_THROW(s.is_default("nope.nope"), Error);
}

TEST(Settings, WithRecordsSourcesAndLeavesTheOriginalAlone) {
    const Settings base(test::small_registry());
    const Settings s = base.with({{"train.epochs", int64_t{9}, "file:run.toml:3"},
                                  {"train.epochs", int64_t{10}, "cli"},
                                  {"train.lr", 1e-3, "env:DFLASH_TRAIN_LR"}});
    EXPECT_EQ(s.get<int64_t>("train.epochs"), 10);  // later assignments win
    EXPECT_EQ(s.source("train.epochs"), "cli");
    EXPECT_EQ(s.source("train.lr"), "env:DFLASH_TRAIN_LR");
    EXPECT_FALSE(s.is_default("train.lr"));
    EXPECT_EQ(base.get<int64_t>("train.epochs"), 6);
    EXPECT_EQ(base.source("train.epochs"), "default");
    // Assignments are checked even when they come from code.
    EXPECT_THROW(base.with({{"train.epochs", int64_t{0}, "cli"}}), Error);
    EXPECT_THROW(base.with({{"train.epochs", 1.5, "cli"}}), Error);
    EXPECT_THROW(base.with({{"train.epoch", int64_t{1}, "cli"}}), Error);
}

TEST(Settings, IsDefaultComparesValuesNotSources) {
    const Settings s = Settings(test::small_registry()).with({{"train.epochs", int64_t{6}, "cli"}});
    EXPECT_EQ(s.source("train.epochs"), "cli");
    EXPECT_TRUE(s.is_default("train.epochs"));
}

TEST(Settings, OverridesForTests) {
    const Settings base(test::small_registry());
    const Settings s = base.with_overrides(
        {{"cuda_graphs.enabled", "false"}, {"drafter.target_layer_ids", "1,2"}});
    EXPECT_FALSE(s.get<bool>("cuda_graphs.enabled"));
    EXPECT_EQ(s.source("cuda_graphs.enabled"), "override");
    EXPECT_EQ(s.get<std::vector<int64_t>>("drafter.target_layer_ids"),
              (std::vector<int64_t>{1, 2}));
    EXPECT_TRUE(base.get<bool>("cuda_graphs.enabled"));
    EXPECT_THROW(base.with_overrides({{"cuda_graphs.enabled", "maybe"}}), Error);
    EXPECT_THROW(base.with_overrides({{"cuda_graphs.enabld", "false"}}), Error);
}

TEST(Settings, HashIsStableAndCoversEveryValue) {
    const Settings a(test::small_registry());
    const Settings b(test::small_registry());  // an independently built registry
    EXPECT_EQ(a.hash(), b.hash());
    EXPECT_EQ(a.hash().size(), 16u);
    // Fixed across processes and builds: FNV-1a 64 of the canonical text. (If this constant
    // changes, saved run hashes no longer match: change it only on purpose.)
    EXPECT_EQ(fnv1a64(""), 0xcbf29ce484222325ull);
    EXPECT_EQ(fnv1a64("a"), 0xaf63dc4c8601ec8cull);
    EXPECT_EQ(a.hash(), fmt::format("{:016x}", fnv1a64(a.canonical_text())));
    EXPECT_NE(a.canonical_text().find("train.lr = 0.0006\n"), std::string::npos);

    // Sources do not matter, values do, and every key counts.
    const Settings same = a.with({{"train.epochs", int64_t{6}, "cli"}});
    EXPECT_EQ(same.hash(), a.hash());
    std::set<std::string> hashes{a.hash()};
    for (const auto& [k, v] :
         std::vector<std::pair<std::string, std::string>>{{"cuda_graphs.enabled", "false"},
                                                          {"cuda_graphs.capture_mode", "global"},
                                                          {"train.epochs", "7"},
                                                          {"train.lr", "0.00061"},
                                                          {"train.output_dir", "runs/x"},
                                                          {"drafter.target_layer_ids", "1"},
                                                          {"train.betas", "0.9"},
                                                          {"data.files", "a.jsonl,b"},
                                                          {"model.rope.base", "10001"}}) {
        EXPECT_TRUE(hashes.insert(a.with_overrides({{k, v}}).hash()).second) << k;
    }
}

}  // namespace
}  // namespace dflash::config

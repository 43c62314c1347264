// Dumping settings as TOML/JSON, loading a dump back, and diffing against a file
// (src/config/dump.h).
#include "config/dump.h"

#include <gtest/gtest.h>

#include "config/test_registry.h"
#include "config/toml_file.h"

namespace dflash::config {
namespace {

Settings unusual_settings() {
    return Settings(test::small_registry())
        .with_overrides({{"cuda_graphs.enabled", "false"},
                         {"cuda_graphs.capture_mode", "relaxed"},
                         {"train.lr", "1e-8"},
                         {"train.betas", "[0.1, 0.3333333333333333, 1]"},
                         {"train.output_dir", "dir with \"quotes\" and \\ and ünïcode"},
                         {"drafter.target_layer_ids", "1,9,17"},
                         {"data.files", "[]"},
                         {"model.rope.base", "1000000000000"}});
}

TEST(Dump, TomlUsesNestedTables) {
    const std::string toml = dump_toml(Settings(test::small_registry()));
    EXPECT_NE(toml.find("\n[cuda_graphs]\ncapture_mode = \"thread_local\"\nenabled = true\n"),
              std::string::npos)
        << toml;
    EXPECT_NE(toml.find("\n[model.rope]\nbase = 10000\n"), std::string::npos) << toml;
    EXPECT_NE(toml.find("lr = 0.0006\n"), std::string::npos) << toml;
}

TEST(Dump, TomlRoundTripGivesTheSameHash) {
    for (const Settings& s : {Settings(test::small_registry()), unusual_settings()}) {
        for (const bool changed : {false, true}) {
            const std::string toml = dump_toml(s, changed);
            const Settings back = Settings(test::small_registry())
                                      .with(parse_toml_text(s.registry(), toml, "dump.toml"));
            EXPECT_EQ(back.hash(), s.hash()) << toml;
            EXPECT_EQ(back.canonical_text(), s.canonical_text());
        }
    }
}

TEST(Dump, ChangedOnlyHasTheNonDefaults) {
    const Settings s = Settings(test::small_registry()).with_overrides({{"train.epochs", "9"}});
    const auto loaded = parse_toml_text(s.registry(), dump_toml(s, true), "d");
    ASSERT_EQ(loaded.size(), 1u);
    EXPECT_EQ(loaded[0].key, "train.epochs");
    EXPECT_EQ(dump_json(s, true).dump(), R"({"train":{"epochs":9}})");
}

TEST(Dump, JsonIsNestedAndTyped) {
    const nlohmann::json j = dump_json(unusual_settings());
    EXPECT_EQ(j["cuda_graphs"]["enabled"], false);
    EXPECT_EQ(j["model"]["rope"]["base"], 1000000000000);
    EXPECT_EQ(j["drafter"]["target_layer_ids"], nlohmann::json({1, 9, 17}));
    EXPECT_EQ(j["train"]["lr"].get<double>(), 1e-8);
    EXPECT_TRUE(j["data"]["files"].is_array());
}

TEST(Dump, DifferencesListOnlyChangedKeysWithBothValues) {
    const Settings s = Settings(test::small_registry()).with_overrides({{"train.epochs", "9"}});
    const auto file =
        parse_toml_text(s.registry(), "[train]\nepochs = 9\nlr = 0.5\n[data]\nfiles = []\n", "f");
    const auto d = differences(s, file);
    ASSERT_EQ(d.size(), 2u);  // epochs is equal, so not listed
    EXPECT_EQ(d[0].key, "data.files");
    EXPECT_EQ(d[1].key, "train.lr");
    EXPECT_EQ(std::get<double>(d[1].current), 6e-4);
    EXPECT_EQ(d[1].current_source, "default");
    EXPECT_EQ(std::get<double>(d[1].other), 0.5);
    EXPECT_EQ(d[1].other_source, "file:f:3");
}

}  // namespace
}  // namespace dflash::config

// The command-line layer: settings flags vs the command's own arguments
// (src/config/command_line.h).
#include "config/command_line.h"

#include <gtest/gtest.h>

#include "config/test_registry.h"
#include "core/error.h"

namespace dflash::config {
namespace {

using Args = std::vector<std::string>;

std::string error_of_cli(const Args& args) {
    auto r = test::small_registry();
    try {
        split_command_line(*r, args);
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(CommandLine, WhichFlagsAreSettingsFlags) {
    EXPECT_TRUE(is_settings_flag("--train.lr"));
    EXPECT_TRUE(is_settings_flag("--train.lr=3"));
    EXPECT_TRUE(is_settings_flag("--set"));
    EXPECT_TRUE(is_settings_flag("--config=x.toml"));
    EXPECT_TRUE(is_settings_flag("--log-level"));
    EXPECT_FALSE(is_settings_flag("--json"));
    EXPECT_FALSE(is_settings_flag("--out=a.b"));  // the dot is in the value, not the name
    EXPECT_FALSE(is_settings_flag("-x.y"));
    EXPECT_FALSE(is_settings_flag("file.toml"));
    EXPECT_FALSE(is_settings_flag("--"));
}

TEST(CommandLine, AllFormsSetValuesAndTheRestPassesThroughInOrder) {
    auto r = test::small_registry();
    const auto cl = split_command_line(
        *r, {"list", "--train.lr", "3e-4", "--json", "--train.epochs=4", "pattern", "--set",
             "cuda_graphs.enabled=false", "--config", "a.toml", "--config=b.toml",
             "--set=drafter.target_layer_ids=1,9,17", "--out", "x"});
    EXPECT_EQ(cl.rest, (Args{"list", "--json", "pattern", "--out", "x"}));
    EXPECT_EQ(cl.config_files, (Args{"a.toml", "b.toml"}));
    ASSERT_EQ(cl.assignments.size(), 4u);
    EXPECT_EQ(cl.assignments[0].key, "train.lr");
    EXPECT_EQ(std::get<double>(cl.assignments[0].value), 3e-4);
    EXPECT_EQ(cl.assignments[0].source, "cli");
    EXPECT_EQ(std::get<int64_t>(cl.assignments[1].value), 4);
    EXPECT_EQ(cl.assignments[2].key, "cuda_graphs.enabled");
    EXPECT_EQ(std::get<bool>(cl.assignments[2].value), false);
    EXPECT_EQ(std::get<std::vector<int64_t>>(cl.assignments[3].value),
              (std::vector<int64_t>{1, 9, 17}));
}

TEST(CommandLine, DoubleDashEndsSettingsParsing) {
    auto r = test::small_registry();
    const auto cl = split_command_line(*r, {"a", "--", "--train.lr", "oops"});
    EXPECT_EQ(cl.rest, (Args{"a", "--", "--train.lr", "oops"}));
    EXPECT_TRUE(cl.assignments.empty());
}

TEST(CommandLine, LogLevelIsShorthand) {
    Registry reg;
    reg.add(Declaration::enumeration("runtime.log_level", "info", {"debug", "info"}, "level"));
    const auto cl = split_command_line(reg, {"--log-level", "debug"});
    ASSERT_EQ(cl.assignments.size(), 1u);
    EXPECT_EQ(cl.assignments[0].key, "runtime.log_level");
    EXPECT_EQ(std::get<std::string>(cl.assignments[0].value), "debug");
    EXPECT_THROW(split_command_line(reg, {"--log-level=loud"}), Error);
}

TEST(CommandLine, BoolsNeedAnExplicitValue) {
    std::string msg = error_of_cli({"--cuda_graphs.enabled"});
    EXPECT_NE(msg.find("needs a value"), std::string::npos) << msg;
    // The next argument is taken as the value, so a forgotten value is a type error, not a toggle.
    msg = error_of_cli({"--cuda_graphs.enabled", "--json"});
    EXPECT_NE(msg.find("`--json`"), std::string::npos) << msg;
    EXPECT_NE(error_of_cli({"--cuda_graphs.enabled", "yes"}), "");
    EXPECT_EQ(error_of_cli({"--cuda_graphs.enabled", "0"}), "");
}

TEST(CommandLine, UnknownKeysSuggestTheNearestInEveryForm) {
    for (const Args& args :
         {Args{"--set", "cuda_graphs.enabld=false"}, Args{"--cuda_graphs.enabld", "false"},
          Args{"--cuda_graphs.enabld=false"}}) {
        const std::string msg = error_of_cli(args);
        EXPECT_NE(msg.find("unknown setting `cuda_graphs.enabld`"), std::string::npos) << msg;
        EXPECT_NE(msg.find("Did you mean `cuda_graphs.enabled`?"), std::string::npos) << msg;
        EXPECT_NE(msg.find("cli"), std::string::npos) << msg;
    }
}

TEST(CommandLine, MalformedSetAndBadValues) {
    EXPECT_NE(error_of_cli({"--set", "train.lr"}).find("KEY=VALUE"), std::string::npos);
    EXPECT_NE(error_of_cli({"--set", "=3"}), "");
    EXPECT_NE(error_of_cli({"--set"}), "");
    const std::string msg = error_of_cli({"--train.epochs", "200"});
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cli --train.epochs"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dflash::config

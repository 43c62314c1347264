// The environment layer: DFLASH_* mirrors, strict parsing, unknown variables
// (src/config/environment.h).
#include "config/environment.h"

#include <gtest/gtest.h>

#include "config/test_registry.h"
#include "core/error.h"

namespace dflash::config {
namespace {

std::string error_of_env(std::map<std::string, std::string> vars) {
    auto r = test::small_registry();
    try {
        environment_assignments(*r, Environment(std::move(vars)));
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(Environment, MirrorsBecomeAssignmentsWithSources) {
    auto r = test::small_registry();
    const auto a =
        environment_assignments(*r, Environment({{"DFLASH_CUDA_GRAPHS_ENABLED", "false"},
                                                 {"DFLASH_DRAFTER_TARGET_LAYER_IDS", "[1,9,17]"},
                                                 {"DFLASH_MODEL_ROPE_BASE", "20"},
                                                 {"PATH", "/usr/bin"},
                                                 {"XDFLASH_NOPE", "1"}}));
    ASSERT_EQ(a.size(), 3u);  // sorted by variable name; non-DFLASH_ variables are ignored
    EXPECT_EQ(a[0].key, "cuda_graphs.enabled");
    EXPECT_EQ(std::get<bool>(a[0].value), false);
    EXPECT_EQ(a[0].source, "env:DFLASH_CUDA_GRAPHS_ENABLED");
    EXPECT_EQ(std::get<std::vector<int64_t>>(a[1].value), (std::vector<int64_t>{1, 9, 17}));
    EXPECT_EQ(a[2].key, "model.rope.base");
}

TEST(Environment, BoolsAcceptOnlyTrueFalseOneZero) {
    EXPECT_EQ(error_of_env({{"DFLASH_CUDA_GRAPHS_ENABLED", "1"}}), "");
    EXPECT_EQ(error_of_env({{"DFLASH_CUDA_GRAPHS_ENABLED", "0"}}), "");
    for (const char* bad : {"maybe", "yes", "TRUE", "off", ""}) {
        const std::string msg = error_of_env({{"DFLASH_CUDA_GRAPHS_ENABLED", bad}});
        EXPECT_NE(msg.find("env:DFLASH_CUDA_GRAPHS_ENABLED"), std::string::npos) << msg;
        EXPECT_NE(msg.find("true, false, 1 or 0"), std::string::npos) << msg;
    }
}

TEST(Environment, TypesAndRangesAreChecked) {
    std::string msg = error_of_env({{"DFLASH_TRAIN_EPOCHS", "six"}});
    EXPECT_NE(msg.find("train.epochs"), std::string::npos) << msg;
    EXPECT_NE(msg.find("six"), std::string::npos) << msg;
    msg = error_of_env({{"DFLASH_TRAIN_EPOCHS", "1000"}});
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
    EXPECT_NE(error_of_env({{"DFLASH_CUDA_GRAPHS_CAPTURE_MODE", "local"}}), "");
    EXPECT_NE(error_of_env({{"DFLASH_DRAFTER_TARGET_LAYER_IDS", "1;9"}}), "");
}

TEST(Environment, UnknownDflashVariablesAreErrorsWithASuggestion) {
    std::string msg = error_of_env({{"DFLASH_CUDA_GRAPHS_ENABLD", "false"}});
    EXPECT_NE(msg.find("DFLASH_CUDA_GRAPHS_ENABLD"), std::string::npos) << msg;
    EXPECT_NE(msg.find("DFLASH_CUDA_GRAPHS_ENABLED (setting `cuda_graphs.enabled`)"),
              std::string::npos)
        << msg;
    msg = error_of_env({{"DFLASH_SOMETHING_ELSE_ENTIRELY", "x"}});
    EXPECT_NE(msg.find("unknown setting"), std::string::npos) << msg;
}

TEST(Environment, FromProcessSeesTheProcessEnvironment) {
    const Environment env = Environment::from_process();
    // PATH is set in every test environment CTest and shells create.
    EXPECT_EQ(env.vars().count("PATH"), 1u);
}

}  // namespace
}  // namespace dflash::config

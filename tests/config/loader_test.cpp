// Layering: default < TOML file < environment < command line, each value with its source
// (src/config/loader.h).
#include "config/loader.h"

#include <gtest/gtest.h>

#include <fstream>

#include "config/test_registry.h"
#include "core/error.h"
#include "support/test_util.h"

namespace dflash::config {
namespace {

TEST(Loader, LaterLayersWinAndSourcesAreRecorded) {
    dflash::test::TempDir dir;
    const std::string path = (dir / "run.toml").string();
    std::ofstream(path) << "[train]\nlr = 0.1\nepochs = 2\noutput_dir = \"from-file\"\n"
                           "[model.rope]\nbase = 99\n";
    const Environment env({{"DFLASH_TRAIN_LR", "0.2"}, {"DFLASH_TRAIN_EPOCHS", "3"}});
    const Loaded l = load_settings(test::small_registry(),
                                   {"cmd-arg", "--config", path, "--train.lr", "0.3"}, env);
    EXPECT_EQ(l.args, (std::vector<std::string>{"cmd-arg"}));
    EXPECT_EQ(l.settings.get<double>("train.lr"), 0.3);  // cli > env > file
    EXPECT_EQ(l.settings.source("train.lr"), "cli");
    EXPECT_EQ(l.settings.get<int64_t>("train.epochs"), 3);  // env > file
    EXPECT_EQ(l.settings.source("train.epochs"), "env:DFLASH_TRAIN_EPOCHS");
    EXPECT_EQ(l.settings.get<std::string>("train.output_dir"), "from-file");  // file > default
    EXPECT_EQ(l.settings.source("train.output_dir"), "file:" + path + ":4");
    EXPECT_EQ(l.settings.source("model.rope.base"), "file:" + path + ":6");
    EXPECT_EQ(l.settings.source("cuda_graphs.enabled"), "default");
}

TEST(Loader, LaterFilesOverrideEarlierOnes) {
    dflash::test::TempDir dir;
    std::ofstream(dir / "a.toml") << "train.epochs = 2\ntrain.lr = 0.5\n";
    std::ofstream(dir / "b.toml") << "train.epochs = 4\n";
    const Loaded l = load_settings(
        test::small_registry(),
        {"--config", (dir / "a.toml").string(), "--config", (dir / "b.toml").string()}, {});
    EXPECT_EQ(l.settings.get<int64_t>("train.epochs"), 4);
    EXPECT_EQ(l.settings.get<double>("train.lr"), 0.5);
}

TEST(Loader, EveryLayerIsCheckedEvenWhenOverridden) {
    // A bad environment value is an error although the command line sets the same key.
    const Environment env(
        std::map<std::string, std::string>{{"DFLASH_CUDA_GRAPHS_ENABLED", "maybe"}});
    EXPECT_THROW(load_settings(test::small_registry(), {"--cuda_graphs.enabled", "true"}, env),
                 Error);
    EXPECT_THROW(load_settings(test::small_registry(), {"--config", "/nonexistent/x.toml"}, {}),
                 Error);
}

}  // namespace
}  // namespace dflash::config

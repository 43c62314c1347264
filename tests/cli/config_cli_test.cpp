// `dflash config` and the settings flags end to end, through the built binary
// (src/cli/cmd_config.cpp, src/cli/main.cpp).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <regex>
#include <sstream>

#include "support/test_util.h"

namespace dflash {
namespace {

using test::has;
using test::run_dflash;

// The line of `output` that starts with `key` (a row of `config list`), or "".
std::string row_of(const std::string& output, const std::string& key) {
    std::istringstream in(output);
    for (std::string line; std::getline(in, line);)
        if (line.rfind(key + " ", 0) == 0) return line;
    return "";
}

// One whitespace-separated column per cell of a `config list` row (the doc column is split too).
std::vector<std::string> cells(const std::string& row) {
    std::istringstream in(row);
    std::vector<std::string> out;
    for (std::string cell; in >> cell;) out.push_back(cell);
    return out;
}

TEST(ConfigCli, ListFindsNestedKeysByRegexOverFullPaths) {
    const auto r = run_dflash("config list 'cuda|graph'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* key : {"cuda_graphs.enabled", "cuda_graphs.capture_mode",
                            "cuda_graphs.max_rerecords", "cuda_graphs.warmup_runs"})
        EXPECT_NE(row_of(r.output, key), "") << key << " missing from:\n" << r.output;
    EXPECT_FALSE(has(r.output, "train.lr")) << r.output;
    const auto row = cells(row_of(r.output, "cuda_graphs.enabled"));
    ASSERT_GE(row.size(), 6u);
    EXPECT_EQ(row[1], "true");     // value
    EXPECT_EQ(row[2], "true");     // default
    EXPECT_EQ(row[3], "bool");     // type
    EXPECT_EQ(row[4], "default");  // source
    EXPECT_EQ(row[5], "DFLASH_CUDA_GRAPHS_ENABLED");
    // Case-insensitive, and a dot-separated pattern matches across the namespace.
    EXPECT_NE(row_of(run_dflash("config list 'CUDA_GRAPHS\\.ENA'").output, "cuda_graphs.enabled"),
              "");
}

TEST(ConfigCli, ColumnsAreAligned) {
    const auto r = run_dflash("config list '^train\\.'");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const size_t value_col = r.output.find("VALUE");
    ASSERT_NE(value_col, std::string::npos);
    std::istringstream in(r.output);
    int rows = 0;
    for (std::string line; std::getline(in, line); ++rows) {
        ASSERT_GT(line.size(), value_col) << line;
        EXPECT_EQ(line[value_col - 1], ' ') << line;
        EXPECT_NE(line[value_col], ' ') << line;
    }
    EXPECT_GT(rows, 15);
}

TEST(ConfigCli, EnvironmentValueAndSourceShowInTheListing) {
    const auto r = run_dflash("config list 'cuda|graph'", "DFLASH_CUDA_GRAPHS_ENABLED=false");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto row = cells(row_of(r.output, "cuda_graphs.enabled"));
    ASSERT_GE(row.size(), 5u) << r.output;
    EXPECT_EQ(row[1], "false");
    EXPECT_EQ(row[2], "true");
    EXPECT_EQ(row[4], "env:DFLASH_CUDA_GRAPHS_ENABLED");
}

TEST(ConfigCli, ListJson) {
    const auto r = run_dflash("config list cuda_graphs.enabled --json --cuda_graphs.enabled=0");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    ASSERT_TRUE(j.is_array());
    ASSERT_EQ(j.size(), 1u);
    EXPECT_EQ(j[0]["key"], "cuda_graphs.enabled");
    EXPECT_EQ(j[0]["value"], false);
    EXPECT_EQ(j[0]["default"], true);
    EXPECT_EQ(j[0]["source"], "cli");
    EXPECT_EQ(j[0]["env"], "DFLASH_CUDA_GRAPHS_ENABLED");
    EXPECT_EQ(j[0]["type"], "bool");
}

TEST(ConfigCli, UnknownKeysFailNamingTheNearest) {
    auto r = run_dflash("config list --set cuda_graphs.enabld=false");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, "dflash: error: ")) << r.output;
    EXPECT_TRUE(has(r.output, "cuda_graphs.enabled")) << r.output;
    r = run_dflash("config list --cuda_graphs.enabld false");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, "`cuda_graphs.enabled`")) << r.output;
    r = run_dflash("config list", "DFLASH_CUDA_GRAPHS_ENABLD=false");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, "DFLASH_CUDA_GRAPHS_ENABLED")) << r.output;
    r = run_dflash("config show train.lrr");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, "`train.lr`")) << r.output;
    r = run_dflash("config explain cuda_graph.enabled");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_TRUE(has(r.output, "`cuda_graphs.enabled`")) << r.output;
}

TEST(ConfigCli, BadValuesFailOnOneLine) {
    for (const auto& [args, env] : std::vector<std::pair<std::string, std::string>>{
             {"config list", "DFLASH_CUDA_GRAPHS_ENABLED=maybe"},
             {"config list --train.lr abc", ""},
             {"config list --drafter.num_layers=0", ""},
             {"config list --runtime.backend tpu", ""},
             {"config list --cuda_graphs.enabled", ""},
             {"config nonsense", ""},
             {"config list '('", ""}}) {
        const auto r = run_dflash(args, env);
        EXPECT_EQ(r.exit_code, 1) << args << " " << env << ":\n" << r.output;
        EXPECT_EQ(r.output.rfind("dflash: error: ", 0), 0u) << r.output;
        EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    }
    const auto r = run_dflash("config list", "DFLASH_CUDA_GRAPHS_ENABLED=maybe");
    EXPECT_TRUE(has(r.output, "maybe")) << r.output;
    EXPECT_TRUE(has(r.output, "env:DFLASH_CUDA_GRAPHS_ENABLED")) << r.output;
}

TEST(ConfigCli, FileValuesShowFileAndLine) {
    test::TempDir dir;
    const std::string path = (dir / "run.toml").string();
    std::ofstream(path) << "# my run\n[train]\nlr = 3e-4\n\n[cuda_graphs]\nenabled = false\n";
    auto r = run_dflash("config show train.lr --config " + path);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "train.lr = 0.0003")) << r.output;
    EXPECT_TRUE(has(r.output, "file:" + path + ":3")) << r.output;
    r = run_dflash("config list cuda_graphs.enabled --config=" + path);
    EXPECT_EQ(cells(row_of(r.output, "cuda_graphs.enabled"))[4], "file:" + path + ":6");
    // Layering through the binary: env beats the file, the command line beats env.
    r = run_dflash("config show train.lr --config " + path, "DFLASH_TRAIN_LR=0.01");
    EXPECT_TRUE(has(r.output, "train.lr = 0.01  (source: env:DFLASH_TRAIN_LR)")) << r.output;
    r = run_dflash("config show train.lr --train.lr 0.02 --config " + path, "DFLASH_TRAIN_LR=0.01");
    EXPECT_TRUE(has(r.output, "train.lr = 0.02  (source: cli)")) << r.output;
}

std::string hash_of(const std::string& args, const std::string& env = "") {
    const auto r = run_dflash("config hash " + args, env);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(std::regex_match(r.output, std::regex("[0-9a-f]{16}\n"))) << r.output;
    return r.output;
}

TEST(ConfigCli, DumpLoadRoundTripGivesTheSameHashInAFreshProcess) {
    test::TempDir dir;
    const std::string flags =
        "--train.lr 1e-5 --drafter.target_layer_ids 1,9,17 --train.output_dir 'a b/\"c\"' "
        "--cuda_graphs.capture_mode relaxed --infer.top_p 0.3333333333333333";
    const std::string env = "DFLASH_CUDA_GRAPHS_ENABLED=0 DFLASH_TRAIN_LOSS_DECAY_GAMMA=3";
    const std::string original = hash_of(flags, env);
    EXPECT_NE(original, hash_of(""));
    for (const std::string mode : {"", "--changed"}) {
        const auto dump = run_dflash("config dump " + mode + " " + flags, env);
        ASSERT_EQ(dump.exit_code, 0) << dump.output;
        const std::string path = (dir / ("dump" + mode + ".toml")).string();
        std::ofstream(path) << dump.output;
        EXPECT_EQ(hash_of("--config " + path), original) << dump.output;
    }
    EXPECT_EQ(hash_of(""), hash_of(""));  // stable across processes
}

TEST(ConfigCli, DumpJsonAndExplain) {
    auto r = run_dflash("config dump --format json --set train.epochs=2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output);
    EXPECT_EQ(j["train"]["epochs"], 2);
    EXPECT_EQ(j["cuda_graphs"]["capture_mode"], "thread_local");
    r = run_dflash("config explain cuda_graphs.capture_mode");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* part : {"thread_local|global|relaxed", "DFLASH_CUDA_GRAPHS_CAPTURE_MODE",
                             "read by:", "default:", "source: default"})
        EXPECT_TRUE(has(r.output, part)) << part << " not in:\n" << r.output;
    EXPECT_NE(run_dflash("config dump --format yaml").exit_code, 0);
}

TEST(ConfigCli, DiffShowsBothValues) {
    test::TempDir dir;
    const std::string path = (dir / "other.toml").string();
    std::ofstream(path) << "[train]\nlr = 0.5\nepochs = 6\n";
    auto r = run_dflash("config diff " + path + " --train.lr 0.25");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto row = cells(row_of(r.output, "train.lr"));
    ASSERT_EQ(row.size(), 5u) << r.output;
    EXPECT_EQ(row[1], "0.25");
    EXPECT_EQ(row[2], "cli");
    EXPECT_EQ(row[3], "0.5");
    EXPECT_EQ(row[4], "file:" + path + ":2");
    EXPECT_EQ(row_of(r.output, "train.epochs"), "");  // equal values are not differences
    r = run_dflash("config diff " + path + " --train.lr 0.5");
    EXPECT_TRUE(has(r.output, "no differences")) << r.output;
}

TEST(ConfigCli, HelpWorksForEveryCommand) {
    for (const char* cmd :
         {"demo", "train", "pretrain", "generate", "bench", "data", "inspect", "config", "plot"}) {
        const auto r = run_dflash(std::string(cmd) + " --help");
        EXPECT_EQ(r.exit_code, 0) << cmd << ":\n" << r.output;
        EXPECT_TRUE(has(r.output, std::string("usage: dflash ") + cmd)) << r.output;
        EXPECT_TRUE(has(r.output, "--set KEY=VALUE")) << r.output;
    }
    const auto r = run_dflash("config list --help");
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "--json")) << r.output;
    EXPECT_NE(run_dflash("trian").exit_code, 0);
    EXPECT_TRUE(has(run_dflash("trian").output, "`train`"));
}

TEST(ConfigCli, LogLevelShorthand) {
    const auto r = run_dflash("config show runtime.log_level --log-level debug");
    EXPECT_TRUE(has(r.output, "runtime.log_level = \"debug\"  (source: cli)")) << r.output;
    EXPECT_NE(run_dflash("config show runtime.log_level --log-level loud").exit_code, 0);
}

// `--config /dev/zero` read until the OOM killer stopped it; a FIFO hung forever. Both are refused
// at once (`timeout` turns a hang into exit code 124 instead of a stuck test).
TEST(ConfigCli, ConfigFilesThatAreNotRegularFilesAreRefusedAtOnce) {
    test::TempDir dir;
    ASSERT_EQ(::mkfifo((dir / "fifo.toml").c_str(), 0644), 0);
    const std::pair<std::string, const char*> cases[] = {
        {"/dev/zero", "is a character device"},
        {(dir / "fifo.toml").string(), "is a FIFO"},
        {dir.path().string(), "is a directory"}};
    for (const auto& [path, kind] : cases) {
        const auto r = run_dflash("config list --config " + path, "timeout 60");
        EXPECT_EQ(r.exit_code, 1) << path << ": " << r.output;
        EXPECT_TRUE(has(r.output, "dflash: error: config file '" + path + "' " + kind)) << r.output;
    }
}

}  // namespace
}  // namespace dflash

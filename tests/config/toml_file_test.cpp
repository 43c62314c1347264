// The TOML layer: nested tables, sources with lines, strict types, unknown keys
// (src/config/toml_file.h).
#include "config/toml_file.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>

#include "config/test_registry.h"
#include "core/error.h"
#include "support/test_util.h"

namespace dflash::config {
namespace {

std::string error_of_toml(const std::string& text) {
    auto r = test::small_registry();
    try {
        parse_toml_text(*r, text, "run.toml");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

const Assignment& find(const std::vector<Assignment>& v, const std::string& key) {
    for (const auto& a : v)
        if (a.key == key) return a;
    throw std::runtime_error("no assignment for " + key);
}

TEST(TomlFile, NestedTablesMapToDottedKeysWithLines) {
    auto r = test::small_registry();
    const auto a = parse_toml_text(*r,
                                   "# a comment\n"
                                   "[cuda_graphs]\n"
                                   "enabled = false\n"
                                   "capture_mode = \"global\"\n"
                                   "\n"
                                   "[train]\n"
                                   "lr = 3e-4\n"
                                   "epochs = 2\n"
                                   "betas = [0.8, 1]\n"
                                   "[model.rope]\n"
                                   "base = 500000\n"
                                   "[drafter]\n"
                                   "target_layer_ids = [1, 9, 17]\n"
                                   "[data]\n"
                                   "files = [\"x.jsonl\", \"y.jsonl\"]\n",
                                   "run.toml");
    ASSERT_EQ(a.size(), 8u);
    EXPECT_EQ(std::get<bool>(find(a, "cuda_graphs.enabled").value), false);
    EXPECT_EQ(find(a, "cuda_graphs.enabled").source, "file:run.toml:3");
    EXPECT_EQ(std::get<std::string>(find(a, "cuda_graphs.capture_mode").value), "global");
    EXPECT_EQ(std::get<double>(find(a, "train.lr").value), 3e-4);
    EXPECT_EQ(find(a, "train.lr").source, "file:run.toml:7");
    EXPECT_EQ(std::get<int64_t>(find(a, "train.epochs").value), 2);
    EXPECT_EQ(std::get<std::vector<double>>(find(a, "train.betas").value),
              (std::vector<double>{0.8, 1.0}));
    EXPECT_EQ(std::get<int64_t>(find(a, "model.rope.base").value), 500000);
    EXPECT_EQ(find(a, "model.rope.base").source, "file:run.toml:11");
    EXPECT_EQ(std::get<std::vector<int64_t>>(find(a, "drafter.target_layer_ids").value),
              (std::vector<int64_t>{1, 9, 17}));
    EXPECT_EQ(std::get<std::vector<std::string>>(find(a, "data.files").value),
              (std::vector<std::string>{"x.jsonl", "y.jsonl"}));
}

TEST(TomlFile, DottedKeysAndInlineTablesWorkToo) {
    auto r = test::small_registry();
    const auto a = parse_toml_text(
        *r, "train.lr = 1e-3\ncuda_graphs = { enabled = false }\n\"model\".rope.base = 7\n", "f");
    ASSERT_EQ(a.size(), 3u);
    EXPECT_EQ(std::get<double>(find(a, "train.lr").value), 1e-3);
    EXPECT_EQ(find(a, "train.lr").source, "file:f:1");
    EXPECT_EQ(std::get<bool>(find(a, "cuda_graphs.enabled").value), false);
    EXPECT_EQ(std::get<int64_t>(find(a, "model.rope.base").value), 7);
}

TEST(TomlFile, UnknownKeysAndSectionsSuggestTheNearest) {
    std::string msg = error_of_toml("[cuda_graphs]\nenabld = false\n");
    EXPECT_NE(msg.find("`cuda_graphs.enabld`"), std::string::npos) << msg;
    EXPECT_NE(msg.find("file:run.toml:2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("Did you mean `cuda_graphs.enabled`?"), std::string::npos) << msg;
    msg = error_of_toml("[cuda_graph]\nenabled = false\n");
    EXPECT_NE(msg.find("Did you mean `cuda_graphs.enabled`?"), std::string::npos) << msg;
    msg = error_of_toml("[trian]\n");  // an empty, misspelt section is not ignored
    EXPECT_NE(msg.find("`trian`"), std::string::npos) << msg;
    msg = error_of_toml("lr = 1e-3\n");  // a key outside its table
    EXPECT_NE(msg.find("unknown setting `lr`"), std::string::npos) << msg;
}

TEST(TomlFile, TypesAreStrict) {
    // A bool must be a TOML boolean, not a string or an integer.
    std::string msg = error_of_toml("[cuda_graphs]\nenabled = \"false\"\n");
    for (const char* part :
         {"cuda_graphs.enabled", "\"false\"", "file:run.toml:2", "a string", "TOML boolean"})
        EXPECT_NE(msg.find(part), std::string::npos) << part << " not in: " << msg;
    EXPECT_NE(error_of_toml("cuda_graphs.enabled = 0\n"), "");
    // An int must be an integer; a float accepts an integer.
    msg = error_of_toml("train.epochs = 2.5\n");
    EXPECT_NE(msg.find("TOML integer"), std::string::npos) << msg;
    EXPECT_EQ(error_of_toml("train.lr = 1\n"), "");
    EXPECT_NE(error_of_toml("train.lr = \"1e-3\"\n"), "");
    EXPECT_NE(error_of_toml("train.output_dir = 5\n"), "");
    EXPECT_NE(error_of_toml("drafter.target_layer_ids = 5\n"), "");
    EXPECT_NE(error_of_toml("drafter.target_layer_ids = [1, \"9\"]\n"), "");
    EXPECT_NE(error_of_toml("drafter.target_layer_ids = [1, 9.5]\n"), "");
    EXPECT_NE(error_of_toml("[train.lr]\nx = 1\n"), "");  // a setting used as a table
}

TEST(TomlFile, RangesAndChoices) {
    std::string msg = error_of_toml("[train]\nepochs = 0\n");
    EXPECT_NE(msg.find("out of range"), std::string::npos) << msg;
    EXPECT_NE(msg.find("file:run.toml:2"), std::string::npos) << msg;
    msg = error_of_toml("cuda_graphs.capture_mode = \"sometimes\"\n");
    EXPECT_NE(msg.find("thread_local|global|relaxed"), std::string::npos) << msg;
    EXPECT_NE(error_of_toml("drafter.target_layer_ids = [1, 64]\n"), "");
    EXPECT_NE(error_of_toml("train.lr = nan\n"), "");
    EXPECT_NE(error_of_toml("train.lr = inf\n"), "");
}

TEST(TomlFile, SyntaxErrorsNameFileAndLine) {
    const std::string msg = error_of_toml("[train]\nlr = = 3\n");
    EXPECT_NE(msg.find("run.toml:2"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not valid TOML"), std::string::npos) << msg;
}

TEST(TomlFile, LoadsFromDiskWithThePathAsGiven) {
    dflash::test::TempDir dir;
    const std::string path = (dir / "run.toml").string();
    std::ofstream(path) << "\n[train]\nepochs = 3\n";
    auto r = test::small_registry();
    const auto a = load_toml_file(*r, path);
    ASSERT_EQ(a.size(), 1u);
    EXPECT_EQ(a[0].source, "file:" + path + ":3");
    EXPECT_THROW(load_toml_file(*r, (dir / "missing.toml").string()), Error);
}

TEST(TomlFile, ADirectoryIsAnErrorNotAnEmptyConfig) {
    dflash::test::TempDir dir;
    auto r = test::small_registry();
    const std::string msg = dflash::test::error_of([&] { load_toml_file(*r, dir.path()); });
    EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
}

// `--config /dev/zero` once read until the OOM killer stopped it, and a FIFO waited forever.
// (Were the FIFO's open to block again, ctest's timeout would end this test; the deadline-guarded
// version is in input_file_test.cpp, the `timeout`-guarded one in config_cli_test.cpp.)
TEST(TomlFile, DevicesFifosAndOversizedFilesAreRefused) {
    dflash::test::TempDir dir;
    auto r = test::small_registry();
    ASSERT_EQ(::mkfifo((dir / "fifo.toml").c_str(), 0644), 0);
    EXPECT_TRUE(dflash::test::has(dflash::test::error_of([&] { load_toml_file(*r, "/dev/zero"); }),
                                  "config file '/dev/zero' is a character device"));
    EXPECT_TRUE(dflash::test::has(
        dflash::test::error_of([&] { load_toml_file(*r, (dir / "fifo.toml").string()); }),
        "is a FIFO"));
    const std::string path = (dir / "run.toml").string();
    const std::string text = "[train]\nepochs = 3\n";  // 19 bytes
    std::ofstream(path) << text;
    EXPECT_EQ(load_toml_file(*r, path, text.size()).size(), 1u);  // exactly at the cap
    const std::string msg = dflash::test::error_of([&] { load_toml_file(*r, path, 18); });
    EXPECT_TRUE(dflash::test::has(msg, "config file '" + path + "' is 19 bytes")) << msg;
    EXPECT_TRUE(dflash::test::has(msg, "18 bytes cap")) << msg;
}

}  // namespace
}  // namespace dflash::config

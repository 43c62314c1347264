// GoogleTest entry point shared by every test executable. One executable holds the tests of one
// tests/ folder (CMakeLists.txt); each file of it stays one CTest test, which runs
//   <folder>_tests --test_file=<file name without .cpp>
// and so only the tests defined in that file. `--list_test_files` prints those names. Both work
// beside the usual --gtest_* flags (a --gtest_filter narrows the file's tests further). A file
// name that no test comes from is an error, so a CTest entry can never pass by running nothing.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace {

// The file a test was defined in, as CTest names it: "sgemm_test" for .../tests/ops/sgemm_test.cpp.
std::string file_stem(const testing::TestInfo& info) {
    return info.file() == nullptr ? "" : std::filesystem::path(info.file()).stem().string();
}

// Every test's full name ("Suite.Name"), by the file it was defined in.
std::map<std::string, std::vector<std::string>> tests_by_file() {
    std::map<std::string, std::vector<std::string>> files;
    const testing::UnitTest& unit = *testing::UnitTest::GetInstance();
    for (int i = 0; i < unit.total_test_suite_count(); ++i) {
        const testing::TestSuite& suite = *unit.GetTestSuite(i);
        for (int j = 0; j < suite.total_test_count(); ++j) {
            const testing::TestInfo& info = *suite.GetTestInfo(j);
            files[file_stem(info)].push_back(std::string(info.test_suite_name()) + "." +
                                             info.name());
        }
    }
    return files;
}

// The filter that runs what `filter` selects among the tests of `file` alone. Without a filter of
// the user's, that is the file's tests by name; with one, the other files' tests are added to its
// negative patterns ("POSITIVE-NEGATIVE", GoogleTest's syntax).
std::string filter_for_file(const std::string& filter, const std::string& file,
                            const std::map<std::string, std::vector<std::string>>& files) {
    std::string out;
    if (filter == "*") {
        for (const std::string& t : files.at(file)) out += (out.empty() ? "" : ":") + t;
        return out;
    }
    const size_t dash = filter.find('-');
    const std::string positive = dash == std::string::npos ? filter : filter.substr(0, dash);
    std::string negative = dash == std::string::npos ? "" : filter.substr(dash + 1);
    for (const auto& [name, tests] : files) {
        if (name == file) continue;
        for (const std::string& t : tests) negative += (negative.empty() ? "" : ":") + t;
    }
    return (positive.empty() ? "*" : positive) + (negative.empty() ? "" : "-" + negative);
}

}  // namespace

int main(int argc, char** argv) {
    ::testing::InitGoogleTest(&argc, argv);  // takes out the --gtest_* flags
    std::string file;
    bool list = false;
    for (int i = 1; i < argc; ++i) {
        const std::string_view arg = argv[i];
        if (arg.starts_with("--test_file=")) {
            file = arg.substr(std::string_view("--test_file=").size());
        } else if (arg == "--list_test_files") {
            list = true;
        } else {
            std::fprintf(stderr,
                         "unknown argument '%s': this test executable takes --gtest_* flags, "
                         "--test_file=NAME (the tests of NAME.cpp alone) and --list_test_files\n",
                         argv[i]);
            return 2;
        }
    }
    const auto files = tests_by_file();
    if (list) {
        for (const auto& entry : files) std::printf("%s\n", entry.first.c_str());
        return 0;
    }
    if (!file.empty()) {
        if (!files.contains(file)) {
            std::fprintf(stderr,
                         "--test_file=%s: no test of this executable is defined in %s.cpp; "
                         "its files are:\n",
                         file.c_str(), file.c_str());
            for (const auto& entry : files) std::fprintf(stderr, "  %s\n", entry.first.c_str());
            return 2;
        }
        GTEST_FLAG_SET(filter, filter_for_file(GTEST_FLAG_GET(filter), file, files));
    }
    return RUN_ALL_TESTS();
}

// Logger and LogSink: level filtering, prefixes, whole lines under concurrency, level names.
#include "core/logging.h"

#include <cstdio>
#include <fstream>
#include <regex>
#include <thread>

#include "support/test_util.h"

namespace dflash {
namespace {

// Strips the "HH:MM:SS " timestamp so lines can be compared exactly.
std::string untimed(const std::string& line) {
    static const std::regex kStamp(R"(^\d\d:\d\d:\d\d )");
    EXPECT_TRUE(std::regex_search(line, kStamp)) << line;
    return std::regex_replace(line, kStamp, "");
}

TEST(Logging, LevelFiltering) {
    auto sink = LogSink::capturing(LogLevel::warn);
    Logger log(sink, "");
    log.trace("t");
    log.debug("d");
    log.info("i {}", 1);
    log.warn("w {}", 2);
    log.error("e {}", 3);
    const auto lines = sink->captured();
    ASSERT_EQ(lines.size(), 2u);
    EXPECT_EQ(untimed(lines[0]), "warn  w 2");
    EXPECT_EQ(untimed(lines[1]), "error e 3");
    EXPECT_FALSE(log.enabled(LogLevel::info));
    EXPECT_TRUE(log.enabled(LogLevel::warn));

    auto off = LogSink::capturing(LogLevel::off);
    Logger quiet(off, "x");
    quiet.error("dropped");
    EXPECT_TRUE(off->captured().empty());
    // A default Logger has no sink and logs nothing (and does not crash).
    Logger none;
    EXPECT_FALSE(none.enabled(LogLevel::error));
    none.error("nothing");
}

TEST(Logging, PrefixesNest) {
    auto sink = LogSink::capturing(LogLevel::trace);
    Logger root(sink, "");
    Logger worker = root.with_prefix("worker 1");
    Logger dev = worker.with_prefix("cuda:1");
    EXPECT_EQ(worker.prefix(), "worker 1");
    EXPECT_EQ(dev.prefix(), "worker 1/cuda:1");
    root.info("start");
    worker.debug("ready");
    dev.trace("graph captured");
    const auto lines = sink->captured();
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(untimed(lines[0]), "info  start");
    EXPECT_EQ(untimed(lines[1]), "debug worker 1: ready");
    EXPECT_EQ(untimed(lines[2]), "trace worker 1/cuda:1: graph captured");
}

// Many threads writing long lines to a real file at once: every line must come out whole.
TEST(Logging, LinesFromManyThreadsNeverInterleave) {
    constexpr int kThreads = 8;
    constexpr int kLines = 300;
    test::TempDir dir("logging");
    const auto path = dir / "log.txt";
    {
        std::FILE* f = std::fopen(path.c_str(), "w");
        ASSERT_NE(f, nullptr);
        auto sink = std::make_shared<LogSink>(LogLevel::info, f);
        std::vector<std::thread> threads;
        for (int t = 0; t < kThreads; ++t) {
            threads.emplace_back([&, t] {
                Logger log = Logger(sink, "").with_prefix(fmt::format("worker {}", t));
                const std::string body(200, static_cast<char>('a' + t));
                for (int i = 0; i < kLines; ++i) log.info("{} {} end", i, body);
            });
        }
        for (auto& th : threads) th.join();
        std::fclose(f);
    }
    std::ifstream in(path);
    std::string line;
    int count = 0;
    std::vector<int> next(kThreads, 0);
    const std::regex kLine(R"(^\d\d:\d\d:\d\d info  worker (\d): (\d+) ([a-h]{200}) end$)");
    while (std::getline(in, line)) {
        std::smatch m;
        ASSERT_TRUE(std::regex_match(line, m, kLine)) << "mangled line: " << line;
        const int t = std::stoi(m[1]);
        EXPECT_EQ(m[3].str(), std::string(200, static_cast<char>('a' + t)));
        // Each thread's lines keep their order.
        EXPECT_EQ(std::stoi(m[2]), next[t]++);
        ++count;
    }
    EXPECT_EQ(count, kThreads * kLines);
}

TEST(Logging, CapturingSinkKeepsEveryLineUnderConcurrency) {
    auto sink = LogSink::capturing(LogLevel::info);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t)
        threads.emplace_back([&, t] {
            Logger log(sink, fmt::format("w{}", t));
            for (int i = 0; i < 500; ++i) log.info("{}", i);
        });
    for (auto& th : threads) th.join();
    EXPECT_EQ(sink->captured().size(), 4000u);
}

TEST(Logging, ParseLogLevel) {
    for (LogLevel l : {LogLevel::trace, LogLevel::debug, LogLevel::info, LogLevel::warn,
                       LogLevel::error, LogLevel::off})
        EXPECT_EQ(parse_log_level(log_level_name(l)), l);
    EXPECT_EQ(parse_log_level("warn"), LogLevel::warn);
    EXPECT_FALSE(parse_log_level("").has_value());
    EXPECT_FALSE(parse_log_level("verbose").has_value());
    EXPECT_FALSE(parse_log_level("info ").has_value());
}

}  // namespace
}  // namespace dflash

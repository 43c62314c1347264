// Leveled logging to a sink (stderr by default) with a per-worker prefix. A Logger is a cheap
// value (a sink pointer and a prefix) handed to whoever logs; there is no global logger.
// Tested by tests/core/logging_test.cpp.
#pragma once

#include <fmt/format.h>

#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dflash {

enum class LogLevel : int { trace = 0, debug, info, warn, error, off };

std::optional<LogLevel> parse_log_level(std::string_view s);
std::string_view log_level_name(LogLevel l);

// Where lines go. One sink per process (made by the command), shared by every worker's Logger.
// Lines are written whole under a lock so workers never interleave within a line.
class LogSink {
  public:
    explicit LogSink(LogLevel level = LogLevel::info, std::FILE* out = stderr)
        : level_(level), out_(out) {}
    // A sink that keeps lines in memory (tests).
    static std::shared_ptr<LogSink> capturing(LogLevel level);

    LogLevel level() const { return level_; }
    void write(LogLevel level, std::string_view prefix, std::string_view msg);
    std::vector<std::string> captured() const;

  private:
    LogLevel level_;
    std::FILE* out_;
    bool capture_ = false;
    mutable std::mutex mutex_;
    std::vector<std::string> lines_;
};

class Logger {
  public:
    Logger() = default;  // logs nothing
    Logger(std::shared_ptr<LogSink> sink, std::string prefix)
        : sink_(std::move(sink)), prefix_(std::move(prefix)) {}

    // A logger for a sub-component: "worker 1" -> "worker 1/cuda:1".
    Logger with_prefix(std::string_view more) const;
    const std::string& prefix() const { return prefix_; }
    bool enabled(LogLevel l) const { return sink_ && l >= sink_->level(); }

    template <typename... A>
    void log(LogLevel l, fmt::format_string<A...> f, A&&... a) const {
        if (enabled(l)) sink_->write(l, prefix_, fmt::format(f, std::forward<A>(a)...));
    }
    template <typename... A>
    void trace(fmt::format_string<A...> f, A&&... a) const {
        log(LogLevel::trace, f, std::forward<A>(a)...);
    }
    template <typename... A>
    void debug(fmt::format_string<A...> f, A&&... a) const {
        log(LogLevel::debug, f, std::forward<A>(a)...);
    }
    template <typename... A>
    void info(fmt::format_string<A...> f, A&&... a) const {
        log(LogLevel::info, f, std::forward<A>(a)...);
    }
    template <typename... A>
    void warn(fmt::format_string<A...> f, A&&... a) const {
        log(LogLevel::warn, f, std::forward<A>(a)...);
    }
    template <typename... A>
    void error(fmt::format_string<A...> f, A&&... a) const {
        log(LogLevel::error, f, std::forward<A>(a)...);
    }

  private:
    std::shared_ptr<LogSink> sink_;
    std::string prefix_;
};

}  // namespace dflash

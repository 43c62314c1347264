// Log sinks and level names. Tested by tests/core/logging_test.cpp.
#include "core/logging.h"

#include <chrono>
#include <ctime>

namespace dflash {

std::optional<LogLevel> parse_log_level(std::string_view s) {
    for (int i = 0; i <= static_cast<int>(LogLevel::off); ++i)
        if (log_level_name(static_cast<LogLevel>(i)) == s) return static_cast<LogLevel>(i);
    return std::nullopt;
}

std::string_view log_level_name(LogLevel l) {
    switch (l) {
        case LogLevel::trace:
            return "trace";
        case LogLevel::debug:
            return "debug";
        case LogLevel::info:
            return "info";
        case LogLevel::warn:
            return "warn";
        case LogLevel::error:
            return "error";
        case LogLevel::off:
            return "off";
    }
    return "?";
}

std::shared_ptr<LogSink> LogSink::capturing(LogLevel level) {
    auto sink = std::make_shared<LogSink>(level, nullptr);
    sink->capture_ = true;
    return sink;
}

void LogSink::write(LogLevel level, std::string_view prefix, std::string_view msg) {
    if (level < level_) return;
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    localtime_r(&t, &tm);
    std::string line =
        fmt::format("{:02}:{:02}:{:02} {:<5} {}{}{}", tm.tm_hour, tm.tm_min, tm.tm_sec,
                    log_level_name(level), prefix, prefix.empty() ? "" : ": ", msg);
    std::lock_guard lock(mutex_);
    if (capture_) {
        lines_.push_back(std::move(line));
    } else if (out_) {
        std::fputs(line.c_str(), out_);
        std::fputc('\n', out_);
        std::fflush(out_);
    }
}

std::vector<std::string> LogSink::captured() const {
    std::lock_guard lock(mutex_);
    return lines_;
}

Logger Logger::with_prefix(std::string_view more) const {
    return Logger(sink_, prefix_.empty() ? std::string(more) : fmt::format("{}/{}", prefix_, more));
}

}  // namespace dflash

// Formatting of DF_CHECK / DF_ASSERT failures. Tested by tests/core/error_test.cpp.
#include "core/error.h"

#include <cstring>

namespace dflash::detail {

namespace {
const char* base_name(const char* file) {
    const char* slash = std::strrchr(file, '/');
    return slash ? slash + 1 : file;
}
}  // namespace

void throw_check_failed(const char* file, int line, const char* cond, const std::string& msg) {
    // User errors carry only the message; the location is kept apart (`dflash --log-level debug`
    // prints it) for whoever reports a bug.
    (void)cond;
    throw Error(msg, fmt::format("{}:{}", base_name(file), line));
}

void throw_assert_failed(const char* file, int line, const char* cond, const std::string& msg) {
    throw Error(
        fmt::format("internal error: `{}` does not hold{}{} at {}:{} (this is a bug in "
                    "dflash; please report it)",
                    cond, msg.empty() ? "" : ": ", msg, base_name(file), line));
}

}  // namespace dflash::detail

// The error classes' helpers: the messages of DF_CHECK / DF_ASSERT failures, throw_error and
// describe_error. Tested by tests/core/error_test.cpp.
#include "core/error.h"

#include <cstring>

namespace dflash {

namespace {
const char* base_name(const char* file) {
    const char* slash = std::strrchr(file, '/');
    return slash ? slash + 1 : file;
}
}  // namespace

void throw_error(ErrorKind kind, const std::string& msg, std::string where) {
    switch (kind) {
        case ErrorKind::internal:
            throw InternalError(msg, std::move(where));
        case ErrorKind::device:
            throw DeviceError(msg, std::move(where));
        case ErrorKind::user:
            break;
    }
    throw UserError(msg, std::move(where));
}

ErrorKind error_kind(const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    return error ? error->kind() : ErrorKind::user;
}

std::string describe_error(const std::exception& e, bool with_origin) {
    std::string text;
    switch (error_kind(e)) {
        case ErrorKind::internal:
            text = "internal error: ";
            break;
        case ErrorKind::device:
            text = "device error: ";
            break;
        case ErrorKind::user:
            text = "error: ";
            break;
    }
    text += e.what();
    // Bugs and device failures name their file:line in the message already.
    const auto* error = dynamic_cast<const Error*>(&e);
    if (with_origin && error && error->kind() == ErrorKind::user && !error->where().empty())
        text += fmt::format(" (raised at {})", error->where());
    for (char& c : text)
        if (c == '\n' || c == '\r') c = ' ';
    return text;
}

namespace detail {

void throw_check_failed(const char* file, int line, const char* cond, const std::string& msg) {
    // User errors carry only the message; the location is kept apart (`dflash --log-level debug`
    // prints it) for whoever reports a bug.
    (void)cond;
    throw UserError(msg, fmt::format("{}:{}", base_name(file), line));
}

void throw_assert_failed(const char* file, int line, const char* cond, const std::string& msg) {
    // The message says it is a bug by itself: it may reach a person through a log line or another
    // error's text, not only through describe_error().
    const std::string where = fmt::format("{}:{}", base_name(file), line);
    throw InternalError(fmt::format("`{}` does not hold{}{} at {} (this is a bug in dflash, not in "
                                    "your input; please report it with the command that failed)",
                                    cond, msg.empty() ? "" : ": ", msg, where),
                        where);
}

}  // namespace detail

}  // namespace dflash

// The project's errors (docs/design.md, "Errors"): one base, dflash::Error, and one class per kind
// of failure, so that whoever reports an error can say whose it is:
//   UserError      DF_CHECK / DF_FAIL: bad input or a bad setting; the message alone is shown.
//   InternalError  DF_ASSERT: a broken invariant, i.e. a bug in dflash; shown as one, with the
//                  file:line of the check and a request to report it.
//   DeviceError    a failed CUDA, cuBLASLt or NCCL call (backend/cuda/cuda_check.h); names the
//                  call, file:line and the device.
// `catch (const Error&)` catches all three. describe_error() is the text the CLI prints for each.
// Tested by tests/core/error_test.cpp.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <stdexcept>
#include <string>

namespace dflash {

// Whose failure an error is: decides how it is shown, and is kept when an error is passed on with
// more context (a worker's failure rethrown by its pool; a file name put in front).
enum class ErrorKind { user, internal, device };

// The base of every dflash error. `what()` is the whole message: it names the value, what was
// expected, and (where there is one) a hint. An Error thrown as such is a user error.
class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& msg, std::string where = {})
        : std::runtime_error(msg), where_(std::move(where)) {}
    // "file.cpp:123" of the check that failed, kept out of a user error's what(): users act on the
    // message.
    const std::string& where() const { return where_; }
    virtual ErrorKind kind() const { return ErrorKind::user; }

  private:
    std::string where_;
};

// Bad input, a bad setting, a missing file: the person running dflash can fix it.
class UserError : public Error {
  public:
    using Error::Error;
};

// A bug in dflash: what() says so, with the check's file:line.
class InternalError : public Error {
  public:
    using Error::Error;
    ErrorKind kind() const override { return ErrorKind::internal; }
};

// A CUDA runtime, cuBLASLt or NCCL call failed: what() names the call, file:line and the device.
class DeviceError : public Error {
  public:
    using Error::Error;
    ErrorKind kind() const override { return ErrorKind::device; }
};

// Throws the class of `kind` with `msg`: for code that passes on an error it caught with more
// context and must keep its kind, e.g. throw_error(e.kind(), path + ": " + e.what(), e.where()).
[[noreturn]] void throw_error(ErrorKind kind, const std::string& msg, std::string where = {});

// The kind of any exception: an Error's own; anything else (std::bad_alloc, a CLI11 parse error)
// counts as user-facing, as its message is all there is to show.
ErrorKind error_kind(const std::exception& e);

// What a command prints when `e` ended it, without the "dflash: " in front and on one line:
//   "error: <message>"                          user errors and foreign exceptions;
//   "internal error: <message>"                 bugs (the message names the check, the file:line
//                                               and asks for a report);
//   "device error: <message>"                   device and library failures.
// `with_origin` (`--log-level debug`) adds the file:line a user error was raised at.
std::string describe_error(const std::exception& e, bool with_origin = false);

namespace detail {
[[noreturn]] void throw_check_failed(const char* file, int line, const char* cond,
                                     const std::string& msg);
[[noreturn]] void throw_assert_failed(const char* file, int line, const char* cond,
                                      const std::string& msg);
}  // namespace detail

}  // namespace dflash

// DF_CHECK(cond, "fmt {}", args...): user/input error, throws UserError. The message should carry
// the offending value, the expectation and a hint, e.g.
//   DF_CHECK(id < L, "target_layer_ids[{}]={} but the target has {} layers (ids 0..{})", i, id, L,
//   L-1);
#define DF_CHECK(cond, ...)                                                   \
    do {                                                                      \
        if (!(cond)) [[unlikely]]                                             \
            ::dflash::detail::throw_check_failed(__FILE__, __LINE__, #cond,   \
                                                 ::fmt::format(__VA_ARGS__)); \
    } while (0)

// DF_ASSERT(cond) or DF_ASSERT(cond, "fmt", args...): internal invariant, always on; throws
// InternalError.
#define DF_ASSERT(cond, ...)                                                      \
    do {                                                                          \
        if (!(cond)) [[unlikely]]                                                 \
            ::dflash::detail::throw_assert_failed(__FILE__, __LINE__, #cond,      \
                                                  ::fmt::format("" __VA_ARGS__)); \
    } while (0)

// DF_FAIL("fmt", args...): unconditional user-facing error (UserError).
#define DF_FAIL(...) \
    ::dflash::detail::throw_check_failed(__FILE__, __LINE__, nullptr, ::fmt::format(__VA_ARGS__))

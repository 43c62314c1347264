// Errors a person can act on (docs/design.md "Errors"): DF_CHECK for bad input, DF_ASSERT for
// internal invariants. Both throw dflash::Error; the CLI prints its message alone and exits
// non-zero. Tested by tests/core/error_test.cpp.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dflash {

// The one exception type of the project. `what()` is the whole message a user sees: it names the
// value, what was expected, and (where there is one) a hint.
class Error : public std::runtime_error {
  public:
    explicit Error(const std::string& msg, std::string where = {})
        : std::runtime_error(msg), where_(std::move(where)) {}
    // "file.cpp:123" of the check that failed, kept out of what(): users act on the message.
    const std::string& where() const { return where_; }

  private:
    std::string where_;
};

namespace detail {
[[noreturn]] void throw_check_failed(const char* file, int line, const char* cond,
                                     const std::string& msg);
[[noreturn]] void throw_assert_failed(const char* file, int line, const char* cond,
                                      const std::string& msg);
}  // namespace detail

}  // namespace dflash

// DF_CHECK(cond, "fmt {}", args...): user/input error. The message should carry the offending
// value, the expectation and a hint, e.g.
//   DF_CHECK(id < L, "target_layer_ids[{}]={} but the target has {} layers (ids 0..{})", i, id, L,
//   L-1);
#define DF_CHECK(cond, ...)                                                   \
    do {                                                                      \
        if (!(cond)) [[unlikely]]                                             \
            ::dflash::detail::throw_check_failed(__FILE__, __LINE__, #cond,   \
                                                 ::fmt::format(__VA_ARGS__)); \
    } while (0)

// DF_ASSERT(cond) or DF_ASSERT(cond, "fmt", args...): internal invariant, always on.
#define DF_ASSERT(cond, ...)                                                      \
    do {                                                                          \
        if (!(cond)) [[unlikely]]                                                 \
            ::dflash::detail::throw_assert_failed(__FILE__, __LINE__, #cond,      \
                                                  ::fmt::format("" __VA_ARGS__)); \
    } while (0)

// DF_FAIL("fmt", args...): unconditional user-facing error.
#define DF_FAIL(...) \
    ::dflash::detail::throw_check_failed(__FILE__, __LINE__, nullptr, ::fmt::format(__VA_ARGS__))

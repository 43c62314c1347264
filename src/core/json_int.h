// Integers read from JSON inputs (training_state.json, manifests, tokenizer.json, config.json).
// nlohmann's get<int64_t>() turns a float such as 1e30 into whatever an unchecked cast gives
// (-9223372036854775808 on x86) and wraps integers that do not fit the type; json_integer takes a
// number only when it is a whole number that fits, and otherwise throws an error that names the
// value as written. Tested by tests/core/json_int_test.cpp.
#pragma once

#include <cmath>
#include <concepts>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "core/error.h"

namespace dflash {

// The value of `v` as a T when `v` is a JSON number holding a whole number within T's range (an
// integral float such as 3.0 counts); nothing otherwise (a fraction, a float outside the range,
// an integer that does not fit, not a number).
template <std::integral T>
std::optional<T> json_exact_integer(const nlohmann::json& v) {
    using L = std::numeric_limits<T>;
    if (v.is_number_unsigned()) {
        const uint64_t u = v.get<uint64_t>();
        if (u > static_cast<uint64_t>(L::max())) return std::nullopt;
        return static_cast<T>(u);
    }
    if (v.is_number_integer()) {
        const int64_t i = v.get<int64_t>();
        if constexpr (L::is_signed) {
            if (i < static_cast<int64_t>(L::min())) return std::nullopt;
        } else {
            if (i < 0) return std::nullopt;
        }
        if (static_cast<uint64_t>(std::max<int64_t>(i, 0)) > static_cast<uint64_t>(L::max()))
            return std::nullopt;
        return static_cast<T>(i);
    }
    if (v.is_number_float()) {
        const double x = v.get<double>();
        // [min, 2^digits) is exactly representable at both ends, unlike max itself.
        const double lo = static_cast<double>(L::min());
        const double hi = std::ldexp(1.0, L::digits);
        if (!std::isfinite(x) || std::trunc(x) != x || x < lo || x >= hi) return std::nullopt;
        return static_cast<T>(x);
    }
    return std::nullopt;
}

// json_exact_integer, or an Error: "{what} is 1e+30; expected a whole number in [.., ..]".
template <std::integral T>
T json_integer(const nlohmann::json& v, std::string_view what) {
    const std::optional<T> x = json_exact_integer<T>(v);
    DF_CHECK(x.has_value(), "{} is {}; expected a whole number in [{}, {}]", what,
             v.dump().substr(0, 80), std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    return *x;
}

}  // namespace dflash

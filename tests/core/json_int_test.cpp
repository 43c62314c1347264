// Integers from JSON inputs (src/core/json_int.h): whole numbers that fit are taken, integral
// floats included; a float past the type's range (1e30, once printed as -9223372036854775808), a
// fraction, an integer that does not fit and a non-number are refused, the error naming the value.
#include "core/json_int.h"

#include "support/test_util.h"

namespace dflash {
namespace {

using nlohmann::json;
using test::error_of;
using test::has;

TEST(JsonInt, TakesWholeNumbersThatFit) {
    EXPECT_EQ(json_integer<int64_t>(json(42), "x"), 42);
    EXPECT_EQ(json_integer<int64_t>(json(-7), "x"), -7);
    EXPECT_EQ(json_integer<int64_t>(json(3.0), "x"), 3);
    EXPECT_EQ(json_integer<int64_t>(json(INT64_MIN), "x"), INT64_MIN);
    EXPECT_EQ(json_integer<int64_t>(json(INT64_MAX), "x"), INT64_MAX);
    EXPECT_EQ(json_integer<uint64_t>(json(UINT64_MAX), "x"), UINT64_MAX);
    EXPECT_EQ(json_integer<int32_t>(json(2147483647), "x"), 2147483647);
    EXPECT_EQ(json_integer<int64_t>(json(-9223372036854775808.0), "x"), INT64_MIN);
}

TEST(JsonInt, RefusesWhatWouldBeCastUnchecked) {
    const std::string e =
        error_of([] { json_integer<int64_t>(json(1e30), "training_state.json: \"step\""); });
    EXPECT_TRUE(has(e,
                    "training_state.json: \"step\" is 1e+30; expected a whole number in "
                    "[-9223372036854775808, 9223372036854775807]"))
        << e;
    EXPECT_FALSE(has(e, "is -9223372036854775808")) << e;
    EXPECT_FALSE(json_exact_integer<int64_t>(json(9223372036854775808.0)).has_value());  // 2^63
    EXPECT_FALSE(json_exact_integer<int64_t>(json(2.5)).has_value());
    EXPECT_FALSE(json_exact_integer<int64_t>(json(UINT64_MAX)).has_value());
    EXPECT_FALSE(json_exact_integer<int32_t>(json(2147483648)).has_value());
    EXPECT_FALSE(json_exact_integer<int32_t>(json(-2147483649)).has_value());
    EXPECT_FALSE(json_exact_integer<uint64_t>(json(-1)).has_value());
    EXPECT_FALSE(json_exact_integer<uint64_t>(json(-1.0)).has_value());
    EXPECT_FALSE(json_exact_integer<int64_t>(json("12")).has_value());
    EXPECT_FALSE(json_exact_integer<int64_t>(json(nullptr)).has_value());
    EXPECT_FALSE(json_exact_integer<int64_t>(json(true)).has_value());
}

}  // namespace
}  // namespace dflash

// Strict text parsing and canonical rendering of setting values (src/config/value.h).
#include "config/value.h"

#include <gtest/gtest.h>

#include <limits>

namespace dflash::config {
namespace {

TEST(ValueText, BoolsAcceptOnlyTrueFalseOneZero) {
    bool b = false;
    EXPECT_TRUE(parse_bool_text("true", b));
    EXPECT_TRUE(b);
    EXPECT_TRUE(parse_bool_text("0", b));
    EXPECT_FALSE(b);
    EXPECT_TRUE(parse_bool_text("1", b));
    EXPECT_TRUE(b);
    for (const char* bad : {"maybe", "TRUE", "True", "yes", "no", "on", "", " true", "2", "01"})
        EXPECT_FALSE(parse_bool_text(bad, b)) << bad;
}

TEST(ValueText, IntsMustBeConsumedWhole) {
    int64_t i = 0;
    EXPECT_TRUE(parse_int_text("-17", i));
    EXPECT_EQ(i, -17);
    EXPECT_TRUE(parse_int_text("9223372036854775807", i));
    EXPECT_EQ(i, std::numeric_limits<int64_t>::max());
    for (const char* bad : {"", "1.5", "3e2", "12abc", " 1", "0x10", "9223372036854775808"})
        EXPECT_FALSE(parse_int_text(bad, i)) << bad;
}

TEST(ValueText, FloatsMustBeFiniteAndWhole) {
    double x = 0;
    EXPECT_TRUE(parse_float_text("3e-4", x));
    EXPECT_EQ(x, 3e-4);
    EXPECT_TRUE(parse_float_text("7", x));
    EXPECT_EQ(x, 7.0);
    for (const char* bad : {"", "abc", "1.0x", "inf", "nan", "1e999", "1,5"})
        EXPECT_FALSE(parse_float_text(bad, x)) << bad;
}

TEST(ValueText, ListsAreCommaSeparatedWithOptionalBrackets) {
    using V = std::vector<std::string>;
    EXPECT_EQ(split_list_text("1,9,17"), (V{"1", "9", "17"}));
    EXPECT_EQ(split_list_text("[1, 9 ,17]"), (V{"1", "9", "17"}));
    EXPECT_EQ(split_list_text(""), V{});
    EXPECT_EQ(split_list_text("[]"), V{});
    EXPECT_EQ(split_list_text("[\"a\", \"b\"]"), (V{"a", "b"}));
    EXPECT_EQ(split_list_text("1,,2"), (V{"1", "", "2"}));  // the empty item then fails to parse
}

TEST(ValueRender, FloatsRoundTripAndStayFloats) {
    for (const double x : {6e-4, 0.1, 1e-8, 7.0, 0.95, 1.0 / 3.0, 123456789.125, -2.5}) {
        const std::string s = format_float(x);
        EXPECT_NE(s.find_first_of(".e"), std::string::npos) << s;
        double back = 0;
        ASSERT_TRUE(parse_float_text(s, back)) << s;
        EXPECT_EQ(back, x) << s;
    }
    EXPECT_EQ(format_float(7.0), "7.0");
}

TEST(ValueRender, TomlLiteralsAndDisplay) {
    EXPECT_EQ(toml_literal(Value(true)), "true");
    EXPECT_EQ(toml_literal(Value(int64_t{-3})), "-3");
    EXPECT_EQ(toml_literal(Value(std::string("a\"b\\c\n"))), "\"a\\\"b\\\\c\\n\"");
    EXPECT_EQ(toml_literal(Value(std::vector<int64_t>{1, 9, 17})), "[1, 9, 17]");
    EXPECT_EQ(toml_literal(Value(std::vector<double>{0.5, 2.0})), "[0.5, 2.0]");
    EXPECT_EQ(toml_literal(Value(std::vector<std::string>{"x", "y"})), "[\"x\", \"y\"]");
    EXPECT_EQ(display_value(Value(std::string("runs/x"))), "runs/x");
    EXPECT_EQ(display_value(Value(std::string())), "\"\"");
    EXPECT_EQ(to_json(Value(std::vector<int64_t>{1, 2})).dump(), "[1,2]");
}

}  // namespace
}  // namespace dflash::config

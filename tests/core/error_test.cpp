// DF_CHECK / DF_ASSERT / DF_FAIL: what is thrown and what the message carries.
#include "core/error.h"

#include <string>

#include "support/test_util.h"

namespace dflash {
namespace {

using test::has;

void check_layer(int id, int layers) {
    DF_CHECK(id < layers, "target_layer_ids[4]={} but the target has {} layers (ids 0..{})", id,
             layers, layers - 1);
}

TEST(Error, CheckPassesSilently) {
    EXPECT_NO_THROW(check_layer(3, 36));
}

TEST(Error, CheckCarriesFormattedValueAndLocation) {
    try {
        check_layer(36, 36);
        FAIL() << "DF_CHECK did not throw";
    } catch (const Error& e) {
        const std::string msg = e.what();
        // The whole user-facing message comes first, exactly as formatted.
        EXPECT_EQ(msg.rfind("target_layer_ids[4]=36 but the target has 36 layers (ids 0..35)", 0),
                  0u)
            << msg;
        // The location is kept apart from the message a user reads.
        EXPECT_FALSE(has(msg, "error_test.cpp")) << msg;
        EXPECT_TRUE(has(e.where(), "error_test.cpp:")) << e.where();
        EXPECT_FALSE(has(msg, "internal error")) << msg;
        // Only the file's base name, not the build machine's path.
        EXPECT_FALSE(has(e.where(), "/tests/core/")) << e.where();
    }
}

TEST(Error, CheckEvaluatesArgumentsOnlyOnFailure) {
    int evaluated = 0;
    auto count = [&] { return ++evaluated; };
    DF_CHECK(true, "never formatted {}", count());
    EXPECT_EQ(evaluated, 0);
    EXPECT_THROW(DF_CHECK(false, "formatted {}", count()), Error);
    EXPECT_EQ(evaluated, 1);
}

TEST(Error, AssertSaysInternalErrorAndNamesTheCondition) {
    const int n = 3;
    try {
        DF_ASSERT(n == 4, "n={}", n);
        FAIL() << "DF_ASSERT did not throw";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(msg.rfind("internal error", 0), 0u) << msg;
        EXPECT_TRUE(has(msg, "n == 4")) << msg;
        EXPECT_TRUE(has(msg, "n=3")) << msg;
        EXPECT_TRUE(has(msg, "error_test.cpp:")) << msg;
        EXPECT_TRUE(has(msg, "bug")) << msg;
    }
    // Without a message.
    try {
        DF_ASSERT(n < 0);
        FAIL() << "DF_ASSERT did not throw";
    } catch (const Error& e) {
        EXPECT_TRUE(has(e.what(), "`n < 0` does not hold at error_test.cpp:")) << e.what();
    }
    EXPECT_NO_THROW(DF_ASSERT(n == 3));
}

TEST(Error, FailAlwaysThrows) {
    try {
        DF_FAIL("unknown config key '{}' (did you mean '{}'?)", "lr_max", "lr");
        FAIL() << "DF_FAIL did not throw";
    } catch (const Error& e) {
        EXPECT_EQ(
            std::string(e.what()).rfind("unknown config key 'lr_max' (did you mean 'lr'?)", 0), 0u)
            << e.what();
    }
}

TEST(Error, ErrorIsARuntimeError) {
    // Callers that only know the standard library still catch it.
    EXPECT_THROW(DF_CHECK(false, "x"), std::runtime_error);
    EXPECT_THROW(DF_ASSERT(false), std::runtime_error);
}

}  // namespace
}  // namespace dflash

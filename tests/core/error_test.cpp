// DF_CHECK / DF_ASSERT / DF_FAIL: which error class each throws and what the message carries;
// throw_error keeping a kind; describe_error, the line `dflash` prints for each kind
// (src/cli/main.cpp prints "dflash: " and it).
#include "core/error.h"

#include <stdexcept>
#include <string>
#include <typeinfo>

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

TEST(Error, AssertSaysItIsABugAndNamesTheCondition) {
    const int n = 3;
    try {
        DF_ASSERT(n == 4, "n={}", n);
        FAIL() << "DF_ASSERT did not throw";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_EQ(e.kind(), ErrorKind::internal);
        EXPECT_TRUE(has(msg, "n == 4")) << msg;
        EXPECT_TRUE(has(msg, "n=3")) << msg;
        EXPECT_TRUE(has(msg, "error_test.cpp:")) << msg;
        EXPECT_TRUE(has(e.where(), "error_test.cpp:")) << e.where();
        // The message says it is a bug by itself (it also reaches people through logs).
        EXPECT_TRUE(has(msg, "bug in dflash")) << msg;
        EXPECT_TRUE(has(msg, "please report")) << msg;
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

TEST(Error, EachMacroThrowsItsClass) {
    EXPECT_THROW(DF_CHECK(false, "x"), UserError);
    EXPECT_THROW(DF_FAIL("x"), UserError);
    EXPECT_THROW(DF_ASSERT(false), InternalError);
    // A user error is not a bug, nor a bug a user error.
    try {
        DF_CHECK(false, "bad input");
    } catch (const InternalError&) {
        ADD_FAILURE() << "DF_CHECK threw an InternalError";
    } catch (const UserError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::user);
    }
    try {
        DF_ASSERT(false);
    } catch (const UserError&) {
        ADD_FAILURE() << "DF_ASSERT threw a UserError";
    } catch (const InternalError& e) {
        EXPECT_EQ(e.kind(), ErrorKind::internal);
    }
    // All share the base every existing `catch (const Error&)` names.
    EXPECT_THROW(DF_CHECK(false, "x"), Error);
    EXPECT_THROW(DF_ASSERT(false), Error);
    EXPECT_THROW(throw DeviceError("x"), Error);
    EXPECT_EQ(DeviceError("x").kind(), ErrorKind::device);
    EXPECT_EQ(Error("x").kind(), ErrorKind::user);  // a bare Error is a user error
}

TEST(Error, ThrowErrorKeepsTheKind) {
    auto thrown = [](ErrorKind kind) -> const std::type_info& {
        try {
            throw_error(kind, "worker 0 (cpu:0) failed: x", "f.cpp:1");
        } catch (const Error& e) {
            EXPECT_EQ(e.kind(), kind);
            EXPECT_STREQ(e.what(), "worker 0 (cpu:0) failed: x");
            EXPECT_EQ(e.where(), "f.cpp:1");
            return typeid(e);
        }
        return typeid(void);
    };
    EXPECT_EQ(thrown(ErrorKind::user), typeid(UserError));
    EXPECT_EQ(thrown(ErrorKind::internal), typeid(InternalError));
    EXPECT_EQ(thrown(ErrorKind::device), typeid(DeviceError));
}

// What `dflash` prints for an exception that ended a command (after "dflash: ").
std::string printed(const auto& throwing, bool with_origin = false) {
    try {
        throwing();
    } catch (const std::exception& e) {
        return describe_error(e, with_origin);
    }
    ADD_FAILURE() << "nothing was thrown";
    return {};
}

TEST(Error, UserErrorsPrintTheMessageAlone) {
    const std::string line = printed([] { DF_CHECK(1 > 2, "train.lr={} must be > 0", -1); });
    EXPECT_EQ(line, "error: train.lr=-1 must be > 0");
    EXPECT_EQ(printed([] { DF_FAIL("unknown command `x`"); }), "error: unknown command `x`");
    // `--log-level debug` adds where it was raised, for whoever reports it.
    const std::string debug = printed([] { DF_FAIL("no such file"); }, true);
    EXPECT_EQ(debug.rfind("error: no such file (raised at error_test.cpp:", 0), 0u) << debug;
    // Whatever a user error says, it is never called internal nor a bug.
    for (const std::string& l : {line, debug}) {
        EXPECT_FALSE(has(l, "internal error")) << l;
        EXPECT_FALSE(has(l, "bug")) << l;
    }
}

TEST(Error, BugsPrintAsInternalErrorsWithTheirOrigin) {
    const int k = 7;
    const std::string line = printed([&] { DF_ASSERT(k % 2 == 0, "k={}", k); });
    EXPECT_EQ(line.rfind("internal error: `k % 2 == 0` does not hold: k=7 at error_test.cpp:", 0),
              0u)
        << line;
    EXPECT_TRUE(has(line, "bug in dflash")) << line;
    EXPECT_TRUE(has(line, "please report")) << line;
    // Rethrown with more context (a worker pool's description), still a bug.
    const std::string passed_on = printed([&] {
        try {
            DF_ASSERT(k == 0);
        } catch (const Error& e) {
            throw_error(e.kind(),
                        std::string("worker 1 (cpu:1) failed during step 3: ") + e.what());
        }
    });
    EXPECT_EQ(passed_on.rfind("internal error: worker 1 (cpu:1) failed during step 3: `k == 0`", 0),
              0u)
        << passed_on;
}

TEST(Error, DeviceErrorsPrintAsDeviceErrors) {
    const std::string msg =
        "CUDA error cudaErrorIllegalAddress (an illegal memory access was encountered) in "
        "`cudaStreamSynchronize(s)` at device.cpp:88 on cuda:1";
    EXPECT_EQ(printed([&] { throw DeviceError(msg, "device.cpp:88"); }), "device error: " + msg);
    // The origin is in the message already: debug adds nothing.
    EXPECT_EQ(printed([&] { throw DeviceError(msg, "device.cpp:88"); }, true),
              "device error: " + msg);
}

TEST(Error, ForeignExceptionsPrintAsErrorsOnOneLine) {
    EXPECT_EQ(printed([] { throw std::runtime_error("--steps: 1.5 is not an integer"); }),
              "error: --steps: 1.5 is not an integer");
    EXPECT_EQ(printed([] { DF_FAIL("two\nlines\r"); }), "error: two lines ");
}

TEST(Error, ErrorIsARuntimeError) {
    // Callers that only know the standard library still catch it.
    EXPECT_THROW(DF_CHECK(false, "x"), std::runtime_error);
    EXPECT_THROW(DF_ASSERT(false), std::runtime_error);
}

}  // namespace
}  // namespace dflash

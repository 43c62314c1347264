// training_state.json integers (src/train/checkpoint.h): a step of 1e30 is refused as what it is,
// not printed as -9223372036854775808 after an unchecked cast; every integer field goes through
// the same check (src/core/json_int.h). The `latest` pointer is read as a checked input file.
#include <sys/stat.h>

#include "support/test_util.h"
#include "train/checkpoint.h"

namespace dflash {
namespace {

using test::error_of;
using test::has;

TEST(TrainingStateJson, OutOfRangeIntegersAreNamedNotWrapped) {
    train::TrainingState s;
    s.kind = "drafter";
    s.step = 3;
    s.total_steps = 6;
    s.loaders = {{0, 3}};
    const auto good = train::training_state_to_json(s);
    auto j = good;
    j["step"] = 1e30;
    std::string e = error_of([&] { train::training_state_from_json(j); });
    EXPECT_TRUE(has(e, "training_state.json: \"step\" is 1e+30; expected a whole number")) << e;
    EXPECT_FALSE(has(e, "-9223372036854775808 ")) << e;
    j = good;
    j["total_steps"] = 6.0;  // a whole float is a whole number
    EXPECT_EQ(train::training_state_from_json(j).total_steps, 6);
    j = good;
    j["format_version"] = 4294967297.0;  // would wrap to 1 as an int
    e = error_of([&] { train::training_state_from_json(j); });
    EXPECT_TRUE(has(e, "\"format_version\" is 4294967297.0")) << e;
}

// The run's `latest` pointer is read as an input file: a FIFO in its place is refused, not waited
// on.
TEST(TrainingStateJson, ALatestPointerThatIsNotAFileIsRefused) {
    test::TempDir run("run");
    ASSERT_EQ(::mkfifo((run / train::kLatestFile).c_str(), 0644), 0);
    const std::string e = error_of([&] { train::latest_checkpoint(run.path()); });
    EXPECT_TRUE(has(e, "is a FIFO")) << e;
}

}  // namespace
}  // namespace dflash

// `dflash demo --quick` end to end through the real binary: every stage runs, the losses fall,
// per-position accuracy rises, speculative decoding is lossless with tau > 1, and the drafter it
// writes passes `dflash inspect`. Labelled slow (about a minute on 2 cores).
#include <regex>

#include "support/test_util.h"

namespace dflash {
namespace {

double capture(const std::string& text, const std::string& pattern, int group = 1) {
    std::smatch m;
    EXPECT_TRUE(std::regex_search(text, m, std::regex(pattern))) << pattern << "\n" << text;
    return m.size() > static_cast<size_t>(group) ? std::stod(m[group]) : 0.0;
}

TEST(DemoQuick, RunsEveryStageAndReports) {
    test::TempDir dir("demo");
    const auto out = dir / "demo";
    const auto r = test::run_dflash("demo --quick --output " + out.string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("lossless: yes"), std::string::npos) << r.output;
    // The untrained target predicts about uniformly over the 264 byte-tokenizer ids, so its
    // first loss is near ln(264) = 5.58; a wrong loss normalisation (a sum, a mean over the
    // wrong count) lands far outside.
    const double first_loss = capture(r.output, R"(target: loss ([0-9.]+) -> )");
    EXPECT_GT(first_loss, 4.5);
    EXPECT_LT(first_loss, 7.0);
    // Target and drafter losses fall.
    EXPECT_GT(capture(r.output, R"(target: loss ([0-9.]+) -> ([0-9.]+))", 1),
              capture(r.output, R"(target: loss ([0-9.]+) -> ([0-9.]+))", 2));
    EXPECT_GT(capture(r.output, R"(drafter: loss ([0-9.]+) -> ([0-9.]+))", 1),
              capture(r.output, R"(drafter: loss ([0-9.]+) -> ([0-9.]+))", 2));
    // Accuracy at block position 1 rises from the first to the last step.
    EXPECT_LT(capture(r.output, R"(first step: ([0-9.]+))"),
              capture(r.output, R"(last step:  ([0-9.]+))"));
    EXPECT_GT(capture(r.output, R"(tau ([0-9.]+), speed-up)"), 1.0);
    // The drafter it built is a valid DFlash checkpoint.
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(drafter  (\S+)  \(DFlash)")));
    const auto ins = test::run_dflash("inspect " + m[1].str());
    EXPECT_EQ(ins.exit_code, 0) << ins.output;
    // Running it again replaces the earlier demo's output instead of refusing.
    const auto again = test::run_dflash("demo --quick --output " + out.string() +
                                        " --pretrain.max_steps 5 --train.max_steps 5");
    EXPECT_EQ(again.exit_code, 0) << again.output;
    // A directory the demo did not make is refused.
    const auto foreign = test::run_dflash("demo --quick --output " + (dir / "..").string());
    EXPECT_NE(foreign.exit_code, 0);
}

// The demo trains the drafter architecture asked for (issue 23): a DFlash2 drafter, lossless, that
// inspect reads as DFlash2.
TEST(DemoQuick, TrainsADflash2DrafterWhenAsked) {
    test::TempDir dir("demo-dflash2");
    const auto out = dir / "demo";
    const auto r = test::run_dflash("demo --quick --output " + out.string() +
                                    " --drafter.architecture dflash2");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("train a DFlash2 drafter"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("lossless: yes"), std::string::npos) << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m, std::regex(R"(drafter  (\S+)  \(DFlash2,)")))
        << r.output;
    const auto ins = test::run_dflash("inspect " + m[1].str());
    EXPECT_EQ(ins.exit_code, 0) << ins.output;
    EXPECT_NE(ins.output.find("DFlash2DraftModel"), std::string::npos) << ins.output;
}

}  // namespace
}  // namespace dflash

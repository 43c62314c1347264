// metrics.jsonl across a resume (src/train/metrics.h truncate_metrics, src/train/trainer.cpp):
// records an interrupted run wrote after its checkpoint are dropped before the resumed run
// writes them again, so every step appears once; a torn last line is dropped too.
#include <gtest/gtest.h>

#include <fstream>

#include "support/test_util.h"
#include "train/drafter_training.h"
#include "train/metrics.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> read_lines(const fs::path& p) {
    std::ifstream in(p);
    std::vector<std::string> out;
    std::string line;
    while (std::getline(in, line)) out.push_back(line);
    return out;
}

// (step, eval) of every record, in file order.
std::vector<std::pair<int64_t, bool>> record_keys(const fs::path& p) {
    std::vector<std::pair<int64_t, bool>> out;
    for (const auto& line : read_lines(p)) {
        const auto j = nlohmann::json::parse(line);
        out.emplace_back(j["step"].get<int64_t>(), j.value("eval", false));
    }
    return out;
}

TEST(TruncateMetrics, KeepsRecordsUpToTheStepAndDropsTornLines) {
    test::TempDir dir("dflash-metrics");
    const fs::path p = dir / "metrics.jsonl";
    {
        std::ofstream out(p);
        out << R"({"step":1,"loss":2.5})"
            << "\n"
            << R"({"step":2,"loss":2.0})"
            << "\n"
            << R"({"step":2,"eval":true,"loss":2.2})"
            << "\n"
            << R"({"step":3,"loss":1.5})"
            << "\n"
            << R"({"step":4,"eval":true})"
            << "\n"
            << R"({"step":5,"lo)";  // killed mid-line
    }
    EXPECT_EQ(train::truncate_metrics(p, 2), 3);
    const auto lines = read_lines(p);
    ASSERT_EQ(lines.size(), 3u);
    EXPECT_EQ(lines[0], R"({"step":1,"loss":2.5})");
    EXPECT_EQ(lines[2], R"({"step":2,"eval":true,"loss":2.2})");
    for (const auto& e : fs::directory_iterator(dir.path()))
        EXPECT_EQ(e.path().filename(), "metrics.jsonl") << "a temporary file was left";
    // Nothing to drop: the file is left as it is; a missing file stays missing.
    EXPECT_EQ(train::truncate_metrics(p, 2), 0);
    EXPECT_EQ(read_lines(p), lines);
    EXPECT_EQ(train::truncate_metrics(dir / "none.jsonl", 2), 0);
    EXPECT_FALSE(fs::exists(dir / "none.jsonl"));
}

TEST(MetricsAfterResume, EveryStepAppearsOnce) {
    test::TempDir dir("dflash-metrics-resume");
    test::write_pattern_dataset(dir / "data", 12, 8);
    test::write_pattern_dataset(dir / "eval", 3, 9);
    test::write_tiny_target(dir / "target");
    train::DrafterTrainJob j = test::drafter_job(dir.path(), "run");
    j.eval_data_dir = dir / "eval";
    const auto s = test::drafter_settings(
        {{"train.max_steps", "5"}, {"train.checkpoint_every", "2"}, {"train.eval_every", "2"}});
    // The first run gets to step 5 (checkpoints 2, 4, 5); its tail after checkpoint 2 stands for
    // what a run killed after step 5 had logged. A torn line, as a kill mid-write leaves.
    const train::TrainSummary first = train_drafter_from_settings(j, s, Logger());
    std::ofstream(first.metrics_path, std::ios::app) << R"({"step":6,"lo)";

    j.resume = dir / "run" / train::checkpoint_name(2);
    const train::TrainSummary resumed = train_drafter_from_settings(j, s, Logger());
    EXPECT_EQ(resumed.first_step, 3);
    const std::vector<std::pair<int64_t, bool>> expected = {{1, false}, {2, false}, {2, true},
                                                            {3, false}, {4, false}, {4, true},
                                                            {5, false}, {5, true}};
    EXPECT_EQ(record_keys(resumed.metrics_path), expected);
}

}  // namespace
}  // namespace dflash

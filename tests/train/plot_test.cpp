// Training-curve SVG: the polylines and points drawn match the records (train loss, eval loss as
// points, accuracy at the chosen block positions), axes/legend/title are present and escaped,
// and missing/empty/malformed metrics files are errors naming FILE:LINE. Also `dflash plot`
// through the binary.
#include "train/plot.h"

#include <regex>
#include <sstream>

#include "core/error.h"
#include "support/test_util.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;

using test::error_of;
using test::has;
using test::read_file;
using test::write_file;

size_t count(const std::string& s, const std::string& needle) {
    size_t n = 0;
    for (size_t p = s.find(needle); p != std::string::npos; p = s.find(needle, p + 1)) ++n;
    return n;
}

// Points of the polyline with class `cls`, as (x, y) pixel pairs.
std::vector<std::pair<double, double>> polyline(const std::string& svg, const std::string& cls) {
    const std::regex re("<polyline class=\"" + cls + "\"[^>]*points=\"([^\"]*)\"");
    std::smatch m;
    if (!std::regex_search(svg, m, re)) return {};
    std::vector<std::pair<double, double>> out;
    std::istringstream in(m[1].str());
    std::string pt;
    while (in >> pt) {
        const auto comma = pt.find(',');
        out.emplace_back(std::stod(pt.substr(0, comma)), std::stod(pt.substr(comma + 1)));
    }
    return out;
}

// 11 training records (steps 0..100, loss falling from 10, 15 accuracies rising with the step and
// falling with the position), eval records at steps 50 and 100, and one record with a null loss.
std::string sample_metrics() {
    std::string s;
    for (int step = 0; step <= 100; step += 10) {
        std::string acc;
        for (int k = 1; k <= 15; ++k)
            acc += fmt::format("{}{}", k > 1 ? "," : "", (step / 100.0) / k);
        s += fmt::format(
            "{{\"step\": {}, \"loss\": {}, \"acc\": [{}], \"tau_implied\": 1.5, \"lr\": 0.001}}\n",
            step, 10.0 - step * 0.05, acc);
        if (step == 50 || step == 100)
            s += fmt::format("{{\"step\": {}, \"eval\": true, \"loss\": {}, \"acc\": [{}]}}\n",
                             step, 9.0 - step * 0.05, acc);
    }
    s += "{\"step\": 105, \"loss\": null}\n";
    return s;
}

TEST(Plot, ParsesTrainAndEvalRecords) {
    const TrainingCurves c = parse_metrics_jsonl(sample_metrics() + "\n", "m.jsonl");
    ASSERT_EQ(c.train.size(), 12u);
    ASSERT_EQ(c.eval.size(), 2u);
    EXPECT_EQ(c.train[3].step, 30);
    EXPECT_DOUBLE_EQ(*c.train[3].loss, 8.5);
    ASSERT_EQ(c.train[3].acc.size(), 15u);
    EXPECT_DOUBLE_EQ(c.train[3].acc[1], 0.15);
    EXPECT_FALSE(c.train.back().loss.has_value());
    EXPECT_EQ(c.eval[1].step, 100);
    EXPECT_TRUE(c.eval[1].eval);
}

TEST(Plot, PlottedPositionsSpreadOverTheBlock) {
    EXPECT_EQ(plotted_positions(15), (std::vector<int64_t>{1, 6, 10, 15}));
    EXPECT_EQ(plotted_positions(3), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(plotted_positions(1), (std::vector<int64_t>{1}));
    EXPECT_TRUE(plotted_positions(0).empty());
}

TEST(Plot, SvgDrawsEverySeriesWithAxesLegendAndTitle) {
    const TrainingCurves c = parse_metrics_jsonl(sample_metrics(), "m.jsonl");
    const std::string svg = render_training_svg(c, "run <a & b>");
    EXPECT_TRUE(svg.starts_with("<?xml"));
    EXPECT_TRUE(svg.ends_with("</svg>\n"));
    EXPECT_TRUE(has(svg, "run &lt;a &amp; b&gt;"));
    EXPECT_FALSE(has(svg, "run <a"));
    // One polyline for the training loss, one per plotted accuracy position.
    EXPECT_EQ(count(svg, "<polyline"), 5u);
    for (const char* s : {"train-acc-1\"", "train-acc-6\"", "train-acc-10\"", "train-acc-15\""})
        EXPECT_TRUE(has(svg, s)) << s;
    EXPECT_EQ(count(svg, "class=\"eval-loss\""), 2u);
    EXPECT_EQ(count(svg, "class=\"eval-acc-1\""), 2u);
    for (const char* s : {">step</text>", ">loss</text>", ">accuracy</text>", ">train loss</text>",
                          ">eval loss</text>", ">position 1</text>", ">position 15</text>",
                          ">100</text>", ">40</text>"})
        EXPECT_TRUE(has(svg, s)) << s;

    // The loss line has one point per finite loss, left to right, falling loss = rising on screen.
    const auto loss = polyline(svg, "train-loss");
    ASSERT_EQ(loss.size(), 11u);
    for (size_t i = 1; i < loss.size(); ++i) {
        EXPECT_GT(loss[i].first, loss[i - 1].first);
        EXPECT_GT(loss[i].second, loss[i - 1].second);  // smaller loss -> larger pixel y
    }
    // Accuracy grows with the step: the first point sits at accuracy 0 (the panel's bottom).
    const auto acc = polyline(svg, "train-acc-1");
    ASSERT_EQ(acc.size(), 11u);
    EXPECT_GT(acc.front().second, acc.back().second);
    // Steps are equally spaced, so the pixel x are too.
    EXPECT_NEAR(loss[2].first - loss[1].first, loss[10].first - loss[9].first, 0.11);
}

TEST(Plot, WithoutAccuracyOrEvalRecordsTheLossStillRenders) {
    const TrainingCurves c =
        parse_metrics_jsonl("{\"step\": 1, \"loss\": 3}\n{\"step\": 1, \"loss\": 3}\n", "m");
    const std::string svg = render_training_svg(c, "t");
    EXPECT_EQ(count(svg, "<polyline"), 1u);
    EXPECT_EQ(polyline(svg, "train-loss").size(), 2u);
    EXPECT_FALSE(has(svg, "eval loss"));
    EXPECT_TRUE(has(svg, "no \"acc\" in the metrics"));
    EXPECT_FALSE(has(svg, "nan"));
    EXPECT_FALSE(has(svg, "inf"));
}

TEST(Plot, BadMetricsFilesAreErrorsNamingFileAndLine) {
    test::TempDir dir("plot");
    const fs::path m = dir / "metrics.jsonl";
    EXPECT_TRUE(has(error_of([&] { plot_run(dir.path(), ""); }), "no metrics file"));
    EXPECT_TRUE(has(error_of([&] { plot_run(dir / "missing", ""); }), "is not a directory"));
    write_file(m, "");
    EXPECT_TRUE(has(error_of([&] { plot_run(dir.path(), ""); }), "holds no metrics records"));
    const std::string good = "{\"step\": 1, \"loss\": 2}\n";
    write_file(m, good + good + "{\"step\": 3, \"loss\": \n");
    EXPECT_TRUE(
        has(error_of([&] { plot_run(dir.path(), ""); }), m.string() + ":3: not valid JSON"));
    write_file(m, good + "{\"loss\": 2}\n");
    EXPECT_TRUE(
        has(error_of([&] { plot_run(dir.path(), ""); }), m.string() + ":2: no integer \"step\""));
    write_file(m, good + "{\"step\": 2, \"loss\": \"x\"}\n");
    EXPECT_TRUE(has(error_of([&] { plot_run(dir.path(), ""); }), ":2: \"loss\" is \"x\""));
    write_file(m, good + "{\"step\": 2, \"acc\": 0.5}\n");
    EXPECT_TRUE(has(error_of([&] { plot_run(dir.path(), ""); }), ":2: \"acc\" is a JSON number"));
    EXPECT_FALSE(fs::exists(dir / "curves.svg"));
}

TEST(Plot, CommandWritesTheSvg) {
    test::TempDir dir("plot");
    write_file(dir / "metrics.jsonl", sample_metrics());
    auto r = test::run_dflash("plot " + dir.path().string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(r.output, "curves.svg")) << r.output;
    EXPECT_EQ(count(read_file(dir / "curves.svg"), "<polyline"), 5u);
    r = test::run_dflash("plot " + dir.path().string() + " --output " + (dir / "x.svg").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(has(read_file(dir / "x.svg"), "</svg>"));
    r = test::run_dflash("plot " + (dir / "nope").string());
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(has(r.output, "dflash: error:")) << r.output;
}

}  // namespace
}  // namespace dflash

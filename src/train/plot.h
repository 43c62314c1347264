// Training curves as a self-contained SVG, written by hand: `dflash plot RUN_DIR` reads
// RUN_DIR/metrics.jsonl (one JSON object per line: step, loss, acc [per block position 1..B-1],
// tau_implied, lr, ...; "eval": true marks evaluation records) and draws training loss (eval loss
// as points) and accuracy at a few block positions against the step. Tested by
// tests/train/plot_test.cpp.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dflash {

struct MetricsRecord {
    int64_t step = 0;
    std::optional<double> loss;  // absent or null (e.g. a non-finite loss) -> not drawn
    std::vector<double> acc;     // [B-1]: accuracy at block position k = index + 1
    bool eval = false;
};

struct TrainingCurves {
    std::vector<MetricsRecord> train;  // in file order
    std::vector<MetricsRecord> eval;
};

// Parses metrics.jsonl text; `source` names it in errors ("run/metrics.jsonl:12: ..."). Blank
// lines are skipped; a malformed line or a text without any record is an error.
TrainingCurves parse_metrics_jsonl(std::string_view text, std::string_view source);
TrainingCurves read_metrics_jsonl(const std::filesystem::path& path);

// Block positions drawn in the accuracy panel: at most four spread over 1..n_positions (always
// 1 and n_positions).
std::vector<int64_t> plotted_positions(int64_t n_positions);

// The whole SVG document: a loss panel and an accuracy panel, axes with ticks and labels, a legend
// per panel and `title` at the top.
std::string render_training_svg(const TrainingCurves& curves, std::string_view title);

// Reads run_dir/metrics.jsonl and writes the SVG to `output` (empty: run_dir/curves.svg).
// Returns the path written.
std::filesystem::path plot_run(const std::filesystem::path& run_dir,
                               const std::filesystem::path& output);

}  // namespace dflash

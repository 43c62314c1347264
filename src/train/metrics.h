// Training metrics (design §3, dflash-spec §2.5): per-position accuracy of the drafted block, the
// acceptance length it implies, throughput; appended to <run>/metrics.jsonl and shown as a
// progress line. Tested by tests/train/optimizer_test.cpp.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace dflash::train {

// One logged step (or evaluation) of a run, after the all-reduce: identical on every worker.
struct StepRecord {
    int64_t step = 0;
    int64_t total_steps = 0;
    int64_t epoch = 0;
    bool eval = false;
    double loss = 0;
    // Drafter: acc[k-1] = accuracy at block position k = 1..B-1. Pretraining: one entry, the
    // next-token accuracy.
    std::vector<double> acc;
    double tau_implied = 0;  // drafter only (0 otherwise)
    double lr = 0;
    double grad_norm = 0;
    double tokens_per_s = 0;
    double elapsed_s = 0;
    double eta_s = 0;
};

// Expected acceptance length if block position k were accepted independently with probability
// acc[k-1]: 1 + sum_k prod_{j<=k} acc[j-1] (the bonus token counts 1).
double implied_tau(const std::vector<double>& acc);

nlohmann::json record_json(const StepRecord& r);

// Appends one JSON object per line to a file, flushed after each line so that a killed run keeps
// every record written so far.
class MetricsLog {
  public:
    explicit MetricsLog(const std::filesystem::path& path);
    ~MetricsLog();
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;
    void append(const StepRecord& r);

  private:
    std::filesystem::path path_;
    std::FILE* file_ = nullptr;
};

// "step 12/300 | loss 3.2101 | acc@1 0.412 | 1234 tok/s | ETA 1m05s"
std::string progress_line(const StepRecord& r);
// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace dflash::train

// Training metrics. Tested by tests/train/optimizer_test.cpp.
#include "train/metrics.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace dflash::train {

double implied_tau(const std::vector<double>& acc) {
    double tau = 1.0, run = 1.0;
    for (double a : acc) {
        run *= a;
        tau += run;
    }
    return tau;
}

nlohmann::json record_json(const StepRecord& r) {
    nlohmann::json j = {{"step", r.step}, {"epoch", r.epoch}, {"loss", r.loss}, {"acc", r.acc}};
    if (r.eval) {
        j["eval"] = true;
        if (r.tau_implied > 0) j["tau_implied"] = r.tau_implied;
        return j;
    }
    if (r.tau_implied > 0) j["tau_implied"] = r.tau_implied;
    j["lr"] = r.lr;
    j["grad_norm"] = r.grad_norm;
    j["tokens_per_s"] = r.tokens_per_s;
    j["elapsed_s"] = r.elapsed_s;
    return j;
}

MetricsLog::MetricsLog(const std::filesystem::path& path) : path_(path) {
    file_ = std::fopen(path.c_str(), "a");
    DF_CHECK(file_ != nullptr,
             "cannot open '{}' for appending metrics; is the run directory "
             "writable?",
             path.string());
}

MetricsLog::~MetricsLog() {
    if (file_) std::fclose(file_);
}

void MetricsLog::append(const StepRecord& r) {
    const std::string line = record_json(r).dump() + "\n";
    DF_CHECK(std::fputs(line.c_str(), file_) >= 0 && std::fflush(file_) == 0,
             "writing metrics to '{}' failed (disk full?)", path_.string());
}

std::string format_duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "?";
    const auto s = static_cast<int64_t>(seconds + 0.5);
    if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
    if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
    return fmt::format("{}s", s);
}

std::string progress_line(const StepRecord& r) {
    std::string acc1 = r.acc.empty() ? "-" : fmt::format("{:.3f}", r.acc.front());
    std::string out =
        fmt::format("step {}/{} | loss {:.4f} | acc@1 {}", r.step, r.total_steps, r.loss, acc1);
    if (r.tau_implied > 0) out += fmt::format(" | tau~{:.2f}", r.tau_implied);
    out += fmt::format(" | {:.0f} tok/s | ETA {}", r.tokens_per_s, format_duration(r.eta_s));
    return out;
}

}  // namespace dflash::train

// Training metrics. Tested by tests/train/optimizer_test.cpp, tests/train/eval_decode_test.cpp
// and tests/train/metrics_resume_test.cpp.
#include "train/metrics.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "core/atomic_file.h"
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

void add_block_acceptance(std::span<const int32_t> tokens, std::span<const uint8_t> loss_mask,
                          std::span<const int32_t> anchors, int64_t block,
                          std::span<const int32_t> argmax, std::span<const float> tv,
                          AcceptanceSums& s) {
    const auto S = static_cast<int64_t>(tokens.size());
    const auto N = static_cast<int64_t>(anchors.size());
    DF_ASSERT(static_cast<int64_t>(loss_mask.size()) == S);
    DF_ASSERT(static_cast<int64_t>(argmax.size()) == N * block);
    DF_ASSERT(tv.empty() || static_cast<int64_t>(tv.size()) == N * block);
    s.has_prob = !tv.empty();
    for (int64_t j = 0; j < N; ++j) {
        const int64_t a = anchors[static_cast<size_t>(j)];
        bool greedy = true;
        double alive = 1.0;
        for (int64_t k = 1; k < block; ++k) {
            const int64_t p = a + k, r = j * block + k;
            if (p >= S || !loss_mask[static_cast<size_t>(p)]) break;
            if (k == 1) s.blocks += 1;
            greedy = greedy && argmax[static_cast<size_t>(r)] == tokens[static_cast<size_t>(p)];
            if (greedy) s.greedy_run += 1;
            if (!tv.empty()) {
                alive *=
                    std::clamp(1.0 - static_cast<double>(tv[static_cast<size_t>(r)]), 0.0, 1.0);
                s.prob_run += alive;
            }
        }
    }
}

double DecodeEval::tau() const {
    return steps > 0 ? static_cast<double>(new_tokens - prompts) / static_cast<double>(steps) : 0.0;
}

namespace {

void add_selector(const SelectorMetrics& m, nlohmann::json& j) {
    j["unary_loss"] = m.unary_loss;
    j["selector_loss"] = m.selector_loss;
    j["selector_loss_alpha"] = m.alpha;
    j["selector_top_k"] = m.top_k;
    j["candidate_recall_at_k"] = m.recall;
    j["teacher_forced_selector_acc"] = m.teacher_forced_acc;
    j["path_accept_len"] = m.path_accept_len;
    j["path_acc"] = m.path_acc;
    j["oracle_accept_len"] = m.oracle_accept_len;
}

}  // namespace

nlohmann::json record_json(const StepRecord& r) {
    nlohmann::json j = {{"step", r.step}, {"epoch", r.epoch}};
    if (!r.eval || r.has_loss) {
        j["loss"] = r.loss;
        if (!r.loss_kind.empty()) j["loss_kind"] = r.loss_kind;
        j["acc"] = r.acc;
        if (r.selector) add_selector(*r.selector, j);
    }
    if (r.eval) {
        j["eval"] = true;
        if (r.tau_implied > 0) j["tau_implied"] = r.tau_implied;
        if (r.tau_greedy > 0) j["tau_greedy"] = r.tau_greedy;
        if (r.tau_prob > 0) j["tau_prob"] = r.tau_prob;
        if (r.decode) {
            j["tau"] = r.decode->tau();
            j["accept_hist"] = r.decode->accept_hist;
            j["decode_prompts"] = r.decode->prompts;
            j["decode_steps"] = r.decode->steps;
            j["decode_s"] = r.decode->seconds;
        }
        return j;
    }
    if (r.tau_implied > 0) j["tau_implied"] = r.tau_implied;
    j["lr"] = r.lr;
    j["grad_norm"] = r.grad_norm;
    j["tokens_per_s"] = r.tokens_per_s;
    j["elapsed_s"] = r.elapsed_s;
    if (r.graphs) j["graphs"] = r.graphs->to_json();
    return j;
}

MetricsLog::MetricsLog(const std::filesystem::path& path, std::optional<int64_t> keep_through_step)
    : path_(path), keep_through_step_(keep_through_step) {}

MetricsLog::~MetricsLog() {
    if (file_) std::fclose(file_);
}

void MetricsLog::append(const StepRecord& r) {
    if (file_ == nullptr) {
        if (keep_through_step_) dropped_ = truncate_metrics(path_, *keep_through_step_);
        file_ = std::fopen(path_.c_str(), "a");
        DF_CHECK(file_ != nullptr,
                 "cannot open '{}' for appending metrics: {}; is the run directory writable?",
                 path_.string(), std::strerror(errno));
    }
    const std::string line = record_json(r).dump() + "\n";
    DF_CHECK(std::fputs(line.c_str(), file_) >= 0 && std::fflush(file_) == 0,
             "writing metrics to '{}' failed (disk full?)", path_.string());
}

int64_t truncate_metrics(const std::filesystem::path& path, int64_t last_step) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return 0;
    std::string line, kept;
    int64_t dropped = 0;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        const bool keep = j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
                          j["step"].get<int64_t>() <= last_step;
        if (keep) {
            kept += line;
            kept += '\n';
        } else {
            ++dropped;
        }
    }
    DF_CHECK(in.eof(), "reading metrics '{}' failed", path.string());
    in.close();
    if (dropped > 0) write_text_atomic(path, kept);
    return dropped;
}

std::string selector_summary(const SelectorMetrics& m) {
    return fmt::format("sel {:.4f} recall@{} {:.3f} tf-acc {:.3f} path {:.2f} oracle {:.2f}",
                       m.selector_loss, m.top_k, m.recall, m.teacher_forced_acc, m.path_accept_len,
                       m.oracle_accept_len);
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
    if (r.selector) out += " | " + selector_summary(*r.selector);
    out += fmt::format(" | {:.0f} tok/s | ETA {}", r.tokens_per_s, format_duration(r.eta_s));
    return out;
}

}  // namespace dflash::train

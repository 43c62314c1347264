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
#include "model/dspark_heads.h"

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

void DsparkMetricSums::add(const DsparkMetricSums& o) {
    blocks += o.blocks;
    tau_sum += o.tau_sum;
    if (accept_sum.size() < o.accept_sum.size()) {
        accept_sum.resize(o.accept_sum.size(), 0.0);
        accept_count.resize(o.accept_sum.size(), 0.0);
    }
    for (size_t k = 0; k < o.accept_sum.size(); ++k) {
        accept_sum[k] += o.accept_sum[k];
        accept_count[k] += o.accept_count[k];
    }
    conf_weight += o.conf_weight;
    conf_abs += o.conf_abs;
    conf_bias += o.conf_bias;
    conf_cumprod_bias += o.conf_cumprod_bias;
}

std::vector<double> DsparkMetricSums::pack(int64_t block) const {
    std::vector<double> p = {blocks, tau_sum, conf_weight, conf_abs, conf_bias, conf_cumprod_bias};
    for (int64_t k = 0; k < block; ++k) {
        const auto i = static_cast<size_t>(k);
        p.push_back(i < accept_sum.size() ? accept_sum[i] : 0.0);
        p.push_back(i < accept_count.size() ? accept_count[i] : 0.0);
    }
    return p;
}

DsparkMetricSums DsparkMetricSums::unpack(std::span<const double> p, int64_t block) {
    DF_ASSERT(static_cast<int64_t>(p.size()) == 6 + 2 * block);
    DsparkMetricSums s;
    s.blocks = p[0];
    s.tau_sum = p[1];
    s.conf_weight = p[2];
    s.conf_abs = p[3];
    s.conf_bias = p[4];
    s.conf_cumprod_bias = p[5];
    for (int64_t k = 0; k < block; ++k) {
        s.accept_sum.push_back(p[static_cast<size_t>(6 + 2 * k)]);
        s.accept_count.push_back(p[static_cast<size_t>(7 + 2 * k)]);
    }
    return s;
}

std::optional<DsparkMetrics> DsparkMetricSums::metrics() const {
    if (blocks <= 0) return std::nullopt;
    DsparkMetrics m;
    m.tau_probabilistic = tau_sum / blocks;
    for (size_t k = 0; k < accept_sum.size(); ++k)
        m.accept_rate.push_back(accept_count[k] > 0 ? accept_sum[k] / accept_count[k] : 0.0);
    m.has_confidence = conf_weight > 0;
    if (m.has_confidence) {
        m.confidence_abs_error = conf_abs / conf_weight;
        m.confidence_bias = conf_bias / conf_weight;
        m.confidence_cumprod_bias = conf_cumprod_bias / conf_weight;
    }
    return m;
}

void add_dspark_metrics(std::span<const uint8_t> loss_mask, std::span<const int32_t> anchors,
                        int64_t block, double gamma, std::span<const float> tv,
                        std::span<const float> conf_logits, DsparkMetricSums& s) {
    const auto N = static_cast<int64_t>(anchors.size());
    DF_ASSERT(static_cast<int64_t>(tv.size()) == N * block);
    DF_ASSERT(conf_logits.empty() || static_cast<int64_t>(conf_logits.size()) == N * block);
    s.accept_sum.resize(static_cast<size_t>(block), 0.0);
    s.accept_count.resize(static_cast<size_t>(block), 0.0);
    for (int64_t j = 0; j < N; ++j) {
        const int64_t a = anchors[static_cast<size_t>(j)];
        double tau = 1.0, acc_prefix = 1.0, conf_prefix = 1.0;
        for (int64_t k = 0; k < block; ++k) {
            // Zero exactly where the slot is not trained (a contiguous prefix of the block).
            const double w = dspark_slot_weight(a, k, loss_mask, gamma);
            if (w <= 0) break;
            if (k == 0) s.blocks += 1;
            const auto r = static_cast<size_t>(j * block + k);
            const double acc = std::clamp(1.0 - static_cast<double>(tv[r]), 0.0, 1.0);
            acc_prefix *= acc;
            tau += acc_prefix;
            s.accept_sum[static_cast<size_t>(k)] += acc;
            s.accept_count[static_cast<size_t>(k)] += 1;
            if (conf_logits.empty()) continue;
            const double c = 1.0 / (1.0 + std::exp(-static_cast<double>(conf_logits[r])));
            conf_prefix *= c;
            s.conf_weight += w;
            s.conf_abs += w * std::fabs(c - acc);
            s.conf_bias += w * (c - acc);
            s.conf_cumprod_bias += w * (conf_prefix - acc_prefix);
        }
        if (dspark_slot_weight(a, 0, loss_mask, gamma) > 0) s.tau_sum += tau;
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
        if (r.dspark) {
            j["tau_probabilistic"] = r.dspark->tau_probabilistic;
            j["accept_rate"] = r.dspark->accept_rate;
            if (r.dspark->has_confidence) {
                j["confidence_abs_error"] = r.dspark->confidence_abs_error;
                j["confidence_bias"] = r.dspark->confidence_bias;
                j["confidence_cumprod_bias"] = r.dspark->confidence_cumprod_bias;
            }
        }
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

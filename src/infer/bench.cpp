// Speculative-decoding benchmark (see bench.h). Tested by tests/infer/bench_test.cpp.
#include "infer/bench.h"

#include <fmt/format.h>
#include <algorithm>

#include "core/error.h"

namespace dflash {

namespace {

double ratio(double num, double den) {
    return den > 0 ? num / den : 0.0;
}

void add_hist(std::vector<int64_t>& sum, const std::vector<int64_t>& h) {
    if (sum.size() < h.size()) sum.resize(h.size(), 0);
    for (size_t n = 0; n < h.size(); ++n) sum[n] += h[n];
}

void add_stats(BenchTotals& t, const BenchRequest& r) {
    t.requests += 1;
    t.prompt_tokens += r.prompt_tokens;
    t.baseline_new_tokens += r.baseline.new_tokens;
    t.speculative_new_tokens += r.speculative.new_tokens;
    t.baseline_steps += r.baseline.steps;
    t.speculative_steps += r.speculative.steps;
    t.baseline_prefill_s += r.baseline.prefill_s;
    t.speculative_prefill_s += r.speculative.prefill_s;
    t.baseline_decode_s += r.baseline.decode_s;
    t.speculative_decode_s += r.speculative.decode_s;
    t.draft_s += r.speculative.draft_s;
    t.verify_s += r.speculative.verify_s;
    t.drafted += r.speculative.drafted;
    t.verified += r.speculative.verified;
    add_hist(t.accept_hist, r.speculative.accept_hist);
    add_hist(t.accepted_hist, r.speculative.accepted_hist);
}

std::string token_text(int32_t t) {
    return t < 0 ? std::string("(end)") : std::to_string(t);
}

}  // namespace

std::string BenchMismatch::to_string() const {
    return fmt::format("prompt {}, position {}: baseline {} vs speculative {}", prompt, position,
                       token_text(baseline_token), token_text(speculative_token));
}

// Only tokens committed after the prefill count: the first token comes from the prefill in both
// runs, so tau is (new_tokens - 1) / steps, as GenerateStats::tau. new_tokens stops at the
// budget and at a stop token, so a last step counts what it committed, not what it accepted:
// the reference decoder's count.
double BenchTotals::tau() const {
    return ratio(static_cast<double>(speculative_new_tokens - requests),
                 static_cast<double>(speculative_steps));
}

double BenchTotals::tau_accepted() const {
    int64_t tokens = 0;
    for (size_t n = 0; n < accepted_hist.size(); ++n)
        tokens += static_cast<int64_t>(n) * accepted_hist[n];
    return ratio(static_cast<double>(tokens), static_cast<double>(speculative_steps));
}

double BenchTotals::baseline_tpot_s() const {
    return ratio(baseline_decode_s, static_cast<double>(baseline_new_tokens));
}

double BenchTotals::speculative_tpot_s() const {
    return ratio(speculative_decode_s, static_cast<double>(speculative_new_tokens));
}

double BenchTotals::speedup() const {
    return ratio(baseline_tpot_s(), speculative_tpot_s());
}

double BenchTotals::predicted_speedup() const {
    const double t_ar = ratio(baseline_decode_s, static_cast<double>(baseline_steps));
    const double t_step = ratio(draft_s + verify_s, static_cast<double>(speculative_steps));
    return ratio(tau() * t_ar, t_step);
}

double BenchReport::mean_request_tau() const {
    // A prompt answered by the prefill alone (stop token first) has no steps and no tau.
    double s = 0;
    int64_t n = 0;
    for (const auto& r : requests) {
        if (r.speculative.steps == 0) continue;
        s += r.speculative.tau();
        ++n;
    }
    return n > 0 ? s / static_cast<double>(n) : 0.0;
}

std::optional<BenchMismatch> first_difference(int64_t prompt, const std::vector<int32_t>& baseline,
                                              const std::vector<int32_t>& speculative) {
    const size_t n = std::min(baseline.size(), speculative.size());
    size_t p = 0;
    while (p < n && baseline[p] == speculative[p]) ++p;
    if (p == n && baseline.size() == speculative.size()) return std::nullopt;
    BenchMismatch m;
    m.prompt = prompt;
    m.position = static_cast<int64_t>(p);
    m.baseline_token = p < baseline.size() ? baseline[p] : -1;
    m.speculative_token = p < speculative.size() ? speculative[p] : -1;
    return m;
}

BenchReport run_bench(const TargetModel& target, const DrafterModel& drafter, Backend& be,
                      const std::vector<Prompt>& prompts, const GenerateOptions& opt,
                      const Logger& log, bool record_steps) {
    SpeculativeEngine baseline(target, nullptr, be);
    SpeculativeEngine speculative(target, &drafter, be);
    return run_bench_engines(baseline, speculative, prompts, opt, log, record_steps);
}

BenchReport run_bench_engines(SpeculativeEngine& baseline, SpeculativeEngine& speculative,
                              const std::vector<Prompt>& prompts, const GenerateOptions& opt,
                              const Logger& log, bool record_steps) {
    DF_CHECK(!prompts.empty(), "bench needs at least one prompt");
    BenchReport rep;
    rep.steps_recorded = record_steps;
    // The speculative runs' options: `opt`, plus a step sink that records into `steps` (and
    // still calls the caller's sink) when asked to.
    std::vector<BenchStep> steps;
    GenerateOptions spec_opt = opt;
    if (record_steps) {
        spec_opt.trace = [&steps, &opt](const StepTrace& t) {
            steps.push_back({{t.drafted.begin(), t.drafted.end()}, t.accepted, t.next});
            if (opt.trace) opt.trace(t);
        };
    }
    rep.backend = speculative.backend().name();
    rep.max_new_tokens = opt.max_new_tokens;
    rep.greedy = opt.sampling.greedy();
    rep.stop_tokens = opt.stop_tokens;
    {
        // Warm-up: first-touch page faults, allocator growth and cold caches would otherwise be
        // charged to whichever run comes first.
        GenerateOptions warm = opt;
        warm.max_new_tokens = std::min<int64_t>(opt.max_new_tokens, 16);
        const auto w = speculative.generate(prompts.front().tokens, warm);
        const DrafterModel* drafter = speculative.drafter();
        DF_ASSERT(drafter != nullptr, "the speculative engine has no drafter");
        rep.block_size = opt.block_size > 0 ? opt.block_size : drafter->block_size();
        // B, or B + 1 for DSpark (every slot drafts): the engine's histogram says.
        rep.max_step_tokens = static_cast<int64_t>(w.stats.accept_hist.size()) - 1;
        // The engines keep their sessions: the warm-up also records their steps (CUDA graphs).
        baseline.generate(prompts.front().tokens, warm);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
        const Prompt& p = prompts[i];
        const GenerateResult a = baseline.generate(p.tokens, opt);
        steps.clear();
        const GenerateResult b = speculative.generate(p.tokens, spec_opt);
        DF_ASSERT(a.stats.accept_hist.size() == 2, "the baseline engine must decode plainly");
        BenchRequest r;
        r.label = p.label;
        r.prompt_tokens = static_cast<int64_t>(p.tokens.size());
        r.prompt_ids = p.tokens;
        r.output_tokens = b.tokens;
        r.baseline = a.stats;
        r.speculative = b.stats;
        r.steps = std::move(steps);
        if (rep.greedy) {
            if (auto m = first_difference(static_cast<int64_t>(i), a.tokens, b.tokens)) {
                r.outputs_match = false;
                log.error("outputs differ: {}", m->to_string());
                rep.mismatches.push_back(*m);
            }
        }
        log.info("prompt {}/{} ({}): {} tokens, tau {:.2f}, {:.1f} -> {:.1f} tok/s", i + 1,
                 prompts.size(), r.label, b.stats.new_tokens, b.stats.tau(),
                 ratio(static_cast<double>(a.stats.new_tokens), a.stats.decode_s),
                 ratio(static_cast<double>(b.stats.new_tokens), b.stats.decode_s));
        add_stats(rep.total, r);
        rep.requests.push_back(std::move(r));
    }
    rep.graphs = speculative.backend().graph_stats();
    rep.draft_precision = speculative.draft_precision();
    rep.target_panels = speculative.target_panels();
    rep.fused_decode = speculative.fused_decode();
    return rep;
}

namespace {

double per_s(int64_t tokens, double s) {
    return ratio(static_cast<double>(tokens), s);
}
double ms(double s) {
    return s * 1e3;
}

struct TableRow {
    std::string idx, label;
    int64_t prompt_tokens, new_tokens, steps;
    double tau, base_tok_s, spec_tok_s, speedup, ttft_ms, draft_ms, verify_ms;
    std::string match;
};

std::string format_row(const TableRow& r, size_t label_w) {
    return fmt::format(
        "{:>6}  {:<{}}  {:>6}  {:>6}  {:>6}  {:>5.2f}  {:>10.1f}  {:>10.1f}  {:>7.2f}x"
        "  {:>8.2f}  {:>8.3f}  {:>9.3f}  {}\n",
        r.idx, r.label, label_w, r.prompt_tokens, r.new_tokens, r.steps, r.tau, r.base_tok_s,
        r.spec_tok_s, r.speedup, r.ttft_ms, r.draft_ms, r.verify_ms, r.match);
}

std::string match_text(const BenchReport& rep, bool match) {
    if (!rep.greedy) return "-";
    return match ? "yes" : "NO";
}

std::string histogram_text(const std::vector<int64_t>& hist) {
    int64_t total = 0, most = 0;
    for (size_t n = 1; n < hist.size(); ++n) {
        total += hist[n];
        most = std::max(most, hist[n]);
    }
    std::string out =
        "acceptance length (tokens committed per step within max_new_tokens, incl. the target's "
        "token):\n";
    out += fmt::format("{:>4}  {:>8}  {:>6}\n", "n", "steps", "share");
    for (size_t n = 1; n < hist.size(); ++n) {
        const size_t bar = most > 0 ? static_cast<size_t>(40 * hist[n] / most) : 0;
        std::string row =
            fmt::format("{:>4}  {:>8}  {:>5.1f}%  {}", n, hist[n],
                        100.0 * ratio(static_cast<double>(hist[n]), static_cast<double>(total)),
                        std::string(bar, '#'));
        while (row.back() == ' ') row.pop_back();
        out += row + "\n";
    }
    return out;
}

}  // namespace

std::string format_bench_table(const BenchReport& rep) {
    size_t label_w = 5;
    for (const auto& r : rep.requests) label_w = std::max(label_w, r.label.size());
    std::string out = fmt::format(
        "{:>6}  {:<{}}  {:>6}  {:>6}  {:>6}  {:>5}  {:>10}  {:>10}  {:>8}  {:>8}  {:>8}  {:>9}  "
        "{}\n",
        "prompt", "label", label_w, "P", "new", "steps", "tau", "base tok/s", "spec tok/s",
        "speed-up", "ttft ms", "draft ms", "verify ms", "same");
    for (size_t i = 0; i < rep.requests.size(); ++i) {
        const BenchRequest& r = rep.requests[i];
        const GenerateStats& a = r.baseline;
        const GenerateStats& b = r.speculative;
        out += format_row(
            {std::to_string(i), r.label, r.prompt_tokens, b.new_tokens, b.steps, b.tau(),
             per_s(a.new_tokens, a.decode_s), per_s(b.new_tokens, b.decode_s),
             ratio(ratio(a.decode_s, static_cast<double>(a.new_tokens)),
                   ratio(b.decode_s, static_cast<double>(b.new_tokens))),
             ms(b.prefill_s), ms(ratio(b.draft_s, static_cast<double>(b.steps))),
             ms(ratio(b.verify_s, static_cast<double>(b.steps))), match_text(rep, r.outputs_match)},
            label_w);
    }
    const BenchTotals& t = rep.total;
    const double steps = static_cast<double>(t.speculative_steps);
    out += format_row(
        {"total", fmt::format("{} prompts", t.requests), t.prompt_tokens, t.speculative_new_tokens,
         t.speculative_steps, t.tau(), per_s(t.baseline_new_tokens, t.baseline_decode_s),
         per_s(t.speculative_new_tokens, t.speculative_decode_s), t.speedup(),
         ms(ratio(t.speculative_prefill_s, static_cast<double>(t.requests))),
         ms(ratio(t.draft_s, steps)), ms(ratio(t.verify_s, steps)),
         match_text(rep, rep.lossless())},
        label_w);
    out +=
        "(tok/s and speed-up: decode after the prefill; ttft: prefill; draft/verify: per step)\n\n";
    const double t_ar = ratio(t.baseline_decode_s, static_cast<double>(t.baseline_steps));
    out += fmt::format(
        "speed-up {:.2f}x measured, {:.2f}x predicted = tau {:.2f} x t_AR {:.3f} ms / (t_draft "
        "{:.3f} + t_verify {:.3f} ms); measured/predicted {:.2f}\n",
        t.speedup(), t.predicted_speedup(), t.tau(), ms(t_ar), ms(ratio(t.draft_s, steps)),
        ms(ratio(t.verify_s, steps)), ratio(t.speedup(), t.predicted_speedup()));
    out += fmt::format(
        "tau (tokens a step commits within max_new_tokens, as the reference decoder counts): "
        "{:.3f} mean of per-prompt tau, {:.3f} pooled over steps; counting what last steps "
        "accepted past the budget or a stop token: {:.3f}\n",
        rep.mean_request_tau(), t.tau(), t.tau_accepted());
    out += fmt::format(
        "block size {} (at most {} tokens a step); backend {}; drafts in {}; target weights {}{}\n",
        rep.block_size, rep.max_step_tokens, rep.backend, rep.draft_precision,
        rep.target_panels ? "in fp32 panels" : "in place",
        rep.fused_decode ? ", decode and verify through the fused decode-block kernels" : "");
    // A DSpark confidence cut (infer.dspark_confidence_threshold) verifies fewer drafts.
    if (t.verified < t.drafted)
        out += fmt::format(
            "confidence cut: {} of {} drafts verified ({:.1f}%), {:.2f} a step instead of {:.2f}\n",
            t.verified, t.drafted, 100.0 * ratio(t.verified, t.drafted), ratio(t.verified, steps),
            ratio(t.drafted, steps));
    if (!rep.greedy) {
        out += "lossless: not checked (temperature > 0: outputs are samples)\n";
    } else if (rep.lossless()) {
        out += fmt::format("lossless: yes, {} of {} greedy outputs identical token for token\n",
                           rep.requests.size(), rep.requests.size());
    } else {
        out +=
            fmt::format("lossless: NO, {} of {} outputs differ; first: {}\n", rep.mismatches.size(),
                        rep.requests.size(), rep.mismatches.front().to_string());
    }
    if (rep.graphs.enabled) out += rep.graphs.summary() + "\n";
    out += '\n';
    out += histogram_text(t.accept_hist);
    return out;
}

nlohmann::json bench_to_json(const BenchReport& rep) {
    using nlohmann::json;
    auto stats = [](const GenerateStats& s) {
        return json{{"new_tokens", s.new_tokens},
                    {"steps", s.steps},
                    {"tau", s.tau()},
                    {"tau_accepted", s.tau_accepted()},
                    {"accept_hist", s.accept_hist},
                    {"accepted_hist", s.accepted_hist},
                    {"prefill_s", s.prefill_s},
                    {"draft_s", s.draft_s},
                    {"verify_s", s.verify_s},
                    {"drafted", s.drafted},
                    {"verified", s.verified},
                    {"decode_s", s.decode_s},
                    {"tokens_per_s", per_s(s.new_tokens, s.decode_s)}};
    };
    json requests = json::array();
    for (const auto& r : rep.requests) {
        requests.push_back({{"label", r.label},
                            {"prompt_tokens", r.prompt_tokens},
                            {"prompt_ids", r.prompt_ids},
                            {"output_tokens", r.output_tokens},
                            {"baseline", stats(r.baseline)},
                            {"speculative", stats(r.speculative)},
                            {"outputs_match", r.outputs_match}});
        if (rep.steps_recorded) {
            json steps = json::array();
            for (const BenchStep& st : r.steps)
                steps.push_back(
                    {{"drafted", st.drafted}, {"accepted", st.accepted}, {"next", st.next}});
            requests.back()["steps"] = std::move(steps);
        }
    }
    json mismatches = json::array();
    for (const auto& m : rep.mismatches) {
        mismatches.push_back({{"prompt", m.prompt},
                              {"position", m.position},
                              {"baseline_token", m.baseline_token},
                              {"speculative_token", m.speculative_token}});
    }
    const BenchTotals& t = rep.total;
    const double steps = static_cast<double>(t.speculative_steps);
    json total = {
        {"requests", t.requests},
        {"prompt_tokens", t.prompt_tokens},
        {"drafted", t.drafted},
        {"verified", t.verified},
        {"baseline_new_tokens", t.baseline_new_tokens},
        {"speculative_new_tokens", t.speculative_new_tokens},
        {"baseline_steps", t.baseline_steps},
        {"speculative_steps", t.speculative_steps},
        {"tau", t.tau()},
        {"tau_mean_of_requests", rep.mean_request_tau()},
        {"tau_accepted", t.tau_accepted()},
        {"accept_hist", t.accept_hist},
        {"accepted_hist", t.accepted_hist},
        {"baseline_tpot_s", t.baseline_tpot_s()},
        {"speculative_tpot_s", t.speculative_tpot_s()},
        {"baseline_tokens_per_s", per_s(t.baseline_new_tokens, t.baseline_decode_s)},
        {"speculative_tokens_per_s", per_s(t.speculative_new_tokens, t.speculative_decode_s)},
        {"ttft_s", ratio(t.speculative_prefill_s, static_cast<double>(t.requests))},
        {"t_ar_s", ratio(t.baseline_decode_s, static_cast<double>(t.baseline_steps))},
        {"t_draft_s", ratio(t.draft_s, steps)},
        {"t_verify_s", ratio(t.verify_s, steps)},
        {"speedup", t.speedup()},
        {"predicted_speedup", t.predicted_speedup()},
        {"measured_over_predicted", ratio(t.speedup(), t.predicted_speedup())}};
    return json{{"backend", rep.backend},
                {"draft_precision", rep.draft_precision},
                {"target_panels", rep.target_panels},
                {"fused_decode", rep.fused_decode},
                {"block_size", rep.block_size},
                {"max_step_tokens", rep.max_step_tokens},
                {"max_new_tokens", rep.max_new_tokens},
                {"greedy", rep.greedy},
                {"stop_tokens", rep.stop_tokens},
                {"lossless_checked", rep.greedy},
                {"lossless", rep.lossless()},
                {"mismatches", mismatches},
                {"requests", requests},
                {"total", total},
                {"graphs", rep.graphs.to_json()}};
}

}  // namespace dflash

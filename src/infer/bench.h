// `dflash bench` as a library: for each prompt, plain decoding and speculative decoding with the
// same engine and options, the metrics of docs/speculative-sampling.md "What `dflash bench`
// measures" (tau, acceptance histogram, time per output token, speed-up, time to first token) and a
// losslessness check (greedy outputs must be identical token for token). Tested by
// tests/infer/bench_test.cpp.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/logging.h"
#include "infer/prompts.h"
#include "infer/spec_decode.h"
#include "model/drafter.h"
#include "model/target.h"

namespace dflash {

// One speculative step of a prompt, recorded on request (`dflash bench --json-steps`), so another
// engine can compare its drafts step by step (tools/reference/drafter_roundtrip.py): the drafts
// the target verified, how many it accepted and the token it added (StepTrace).
struct BenchStep {
    std::vector<int32_t> drafted;
    int64_t accepted = 0;
    int32_t next = 0;
};

// One prompt: the plain run and the speculative run.
struct BenchRequest {
    std::string label;
    int64_t prompt_tokens = 0;
    std::vector<int32_t> prompt_ids;     // what was decoded (for cross-checks by other engines)
    std::vector<int32_t> output_tokens;  // the speculative run's new tokens
    GenerateStats baseline;              // plain decoding (block size 1)
    GenerateStats speculative;           // drafter + target
    bool outputs_match = true;           // token-for-token equal outputs (checked only when greedy)
    std::vector<BenchStep> steps;        // the speculative run's steps, when recorded
};

// The first difference between the baseline's and the speculative output of one prompt.
struct BenchMismatch {
    int64_t prompt = 0;              // index into the prompt list
    int64_t position = 0;            // index into the generated tokens
    int32_t baseline_token = -1;     // -1: the output ended here
    int32_t speculative_token = -1;  // -1: the output ended here
    std::string to_string() const;   // "prompt i, position p: baseline t vs speculative u"
};

// Sums over all prompts, and the figures derived from them. Times per output token are decode
// time (after the prefill) over new tokens, as in the reference benchmark.
struct BenchTotals {
    int64_t requests = 0;
    int64_t prompt_tokens = 0;
    int64_t baseline_new_tokens = 0, speculative_new_tokens = 0;
    int64_t baseline_steps = 0, speculative_steps = 0;
    // [B+1]: steps that committed n tokens within the budget (through a stop token), n = 1..B;
    // the reference decoder's acceptance lengths (GenerateStats::accept_hist).
    std::vector<int64_t> accept_hist;
    // [B+1]: steps that accepted n - 1 drafts, counted in full past the budget or a stop token
    // (GenerateStats::accepted_hist).
    std::vector<int64_t> accepted_hist;
    double baseline_prefill_s = 0, speculative_prefill_s = 0;
    double baseline_decode_s = 0, speculative_decode_s = 0;
    double draft_s = 0, verify_s = 0;
    // Drafts proposed and drafts the target verified (fewer with a DSpark confidence cut,
    // infer.dspark_confidence_threshold).
    int64_t drafted = 0, verified = 0;

    double tau() const;  // tokens committed per step within the budget, pooled over prompts
    // a + 1 per step, pooled, counting what last steps accepted past the budget or a stop token.
    double tau_accepted() const;
    double baseline_tpot_s() const;     // baseline decode time per output token
    double speculative_tpot_s() const;  // speculative decode time per output token
    double speedup() const;             // baseline_tpot_s / speculative_tpot_s
    // tau * t_AR / (t_draft + t_verify): t_AR = baseline decode time per step (one token each),
    // t_draft / t_verify = mean drafter / target time per speculative step. What the speed-up
    // would be if the two forwards were the only cost (perf target 9).
    double predicted_speedup() const;
};

struct BenchReport {
    std::string backend;  // where it ran: "cpu", "cuda:0"
    // What the drafter multiplied in (SpeculativeEngine::draft_precision).
    std::string draft_precision;
    bool target_panels = false;  // the target multiplied through fp32 panels (target_panels())
    bool fused_decode = false;   // the target's decode and verify through the fused ops (CUDA)
    int64_t block_size = 0;      // the drafter's block B
    // The most a step commits: B, or B + 1 for DSpark (all B slots draft).
    int64_t max_step_tokens = 0;
    int64_t max_new_tokens = 0;
    bool greedy = true;  // losslessness is only checked under greedy decoding
    std::vector<int32_t> stop_tokens;
    std::vector<BenchRequest> requests;
    bool steps_recorded = false;  // BenchRequest::steps filled (and written to the JSON)
    BenchTotals total;
    std::vector<BenchMismatch> mismatches;  // empty when lossless (or not checked)
    GraphStats graphs;                      // the device's graph cache after both engines ran
    // Mean over prompts of each prompt's tau (docs/speculative-sampling.md "What `dflash bench`
    // measures"): the reference benchmark's "acceptance length"; prompts without steps skipped.
    double mean_request_tau() const;
    bool lossless() const { return mismatches.empty(); }
};

// The first difference between two outputs of prompt `prompt`; nullopt when they are equal.
std::optional<BenchMismatch> first_difference(int64_t prompt, const std::vector<int32_t>& baseline,
                                              const std::vector<int32_t>& speculative);

// A short warm-up (the first prompt, at most 16 tokens, through each engine), then for each prompt
// the baseline run and the speculative run with identical options. Progress and every mismatch
// are logged. `record_steps` keeps every speculative step of every prompt (BenchRequest::steps).
BenchReport run_bench(const TargetModel& target, const DrafterModel& drafter, Backend& be,
                      const std::vector<Prompt>& prompts, const GenerateOptions& opt,
                      const Logger& log, bool record_steps = false);

// The same with the two engines given: `baseline` must decode plainly and `speculative` with a
// drafter. Lets tests pit a speculative engine against a baseline of a different target.
BenchReport run_bench_engines(SpeculativeEngine& baseline, SpeculativeEngine& speculative,
                              const std::vector<Prompt>& prompts, const GenerateOptions& opt,
                              const Logger& log, bool record_steps = false);

// An aligned table a person reads: one row per prompt and a total row, the prediction, the
// losslessness verdict, then the acceptance-length histogram.
std::string format_bench_table(const BenchReport& r);

nlohmann::json bench_to_json(const BenchReport& r);

}  // namespace dflash

// Training metrics (docs/training.md "Metrics"): per-position accuracy of the drafted block, the
// acceptance length it implies, the real acceptance length of speculative decoding on held-out
// prompts, throughput, and DFlash2's selector metrics; appended to <run>/metrics.jsonl and shown as
// a progress line. Tested by tests/train/optimizer_test.cpp, tests/train/eval_decode_test.cpp
// (real tau) and tests/train/metrics_resume_test.cpp (the rewrite on resume).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/step_graph.h"

namespace dflash::train {

// Greedy speculative decoding of the held-out prompts with the weights of one evaluation: what
// `dflash bench` would report for the drafter at that step.
struct DecodeEval {
    int64_t prompts = 0;
    int64_t new_tokens = 0;  // summed over prompts; each prompt's first comes from prefill
    int64_t steps = 0;       // draft + verify steps, summed over prompts
    std::vector<int64_t> accept_hist;  // [B+1]: steps that committed n tokens, n = 1..B
    double seconds = 0;
    // Pooled acceptance length: sum(new_tokens - 1) / sum(steps), as BenchTotals::tau.
    double tau() const;
};

// DFlash2's candidate selector (docs/training.md "Metrics"), over the rows and blocks that carry
// loss weight; r.loss of a record with these is unary_loss + alpha * selector_loss.
struct SelectorMetrics {
    int64_t top_k = 0;
    double alpha = 0;
    double unary_loss = 0;
    double selector_loss = 0;       // the weighted K-way CE, normalised like the unary loss
    double recall = 0;              // target in the strict unary top-K
    double teacher_forced_acc = 0;  // argmax of the (injected) candidates' scores is the target
    // Greedy walk from the anchor over the strict candidates: 1 + the run of slots it gets right.
    double path_accept_len = 0;
    // 1 + the run of slots whose target is in the strict top-K (a perfect selector's length).
    double oracle_accept_len = 0;
    std::vector<double> path_acc;  // [B-1]: accuracy at slot k given the path alive before it
};

// DSpark's own evaluation metrics (recipe spec §1.5; docs/training.md "Metrics"), over all B slots
// of each block (a DSpark slot k drafts token a + k + 1). With valid_k the slot's training mask (a
// contiguous prefix: tokens a + 1 .. a + k + 1 inside the sequence and trained), w_k its loss
// weight, acc_k = clamp(1 - tv_k, 0, 1) the chance that its sampled draft survives and c_k =
// sigmoid of the confidence head's logit:
//   tau_probabilistic = mean over blocks with a valid slot 0 of 1 + sum_k prod_{i<=k} acc_i valid_i
//   accept_rate[k]    = mean of acc_k over the valid slots k
//   confidence_abs_error = sum_k w_k |c_k - acc_k| / sum w;  confidence_bias: the same of c - acc
//   confidence_cumprod_bias = sum_k w_k (prod_{i<=k} c_i valid_i - prod_{i<=k} acc_i valid_i) / sum
//   w
struct DsparkMetrics {
    double tau_probabilistic = 0;
    std::vector<double> accept_rate;  // slot k = 0 .. B-1 (0 where no slot k was valid)
    bool has_confidence = false;      // the next three are set
    double confidence_abs_error = 0, confidence_bias = 0, confidence_cumprod_bias = 0;
};

// One logged step (or evaluation) of a run, after the all-reduce: identical on every worker.
struct StepRecord {
    int64_t step = 0;
    int64_t total_steps = 0;
    int64_t epoch = 0;
    bool eval = false;
    double loss = 0;
    std::string loss_kind;  // train.loss as its canonical text ("kl", "0.1*ce+0.9*l1"); written
                            // next to loss when set
    // Drafter: acc[k-1] = accuracy at block position k = 1..B-1. Pretraining: one entry, the
    // next-token accuracy.
    std::vector<double> acc;
    double tau_implied = 0;  // drafter only (0 otherwise)
    // Evaluations of drafters on held-out data (0 otherwise; docs/training.md "Metrics"): the
    // acceptance length of greedy verification of each block, 1 + the run of drafted slots whose
    // argmax is the data's token, and the expected length when drafts are sampled and verified
    // against the target's distribution, 1 + sum_k prod_{i<=k} (1 - TV(p_i, q_i)); both averaged
    // over the evaluation's blocks (AcceptanceSums).
    double tau_greedy = 0;
    double tau_prob = 0;
    double lr = 0;
    double grad_norm = 0;
    double tokens_per_s = 0;
    double elapsed_s = 0;
    double eta_s = 0;
    // Evaluations only: false when there is no held-out data (only prompts), so loss and acc
    // mean nothing; decode is set when held-out prompts were decoded (worker 0 only).
    bool has_loss = true;
    std::optional<DecodeEval> decode;
    // Training steps on a device with a graph cache: worker 0's counters so far.
    std::optional<GraphStats> graphs;
    std::optional<SelectorMetrics> selector;  // DFlash2 drafters
    std::optional<DsparkMetrics> dspark;      // DSpark drafters' evaluations
};

// Their sums, additive over micro-batches and workers; packed as 6 + 2B doubles for the sum.
struct DsparkMetricSums {
    double blocks = 0, tau_sum = 0;
    std::vector<double> accept_sum, accept_count;  // [B]
    double conf_weight = 0, conf_abs = 0, conf_bias = 0, conf_cumprod_bias = 0;
    void add(const DsparkMetricSums& o);
    std::vector<double> pack(int64_t block) const;
    static DsparkMetricSums unpack(std::span<const double> packed, int64_t block);
    // Empty without blocks.
    std::optional<DsparkMetrics> metrics() const;
};
// Adds one packed sequence's blocks: anchors[j] starts block j, its rows j * block + k; tv
// [N * block] as the DSpark loss writes it; conf_logits (empty without a confidence head, else
// [N * block]); gamma the loss's decay (dspark_slot_weight).
void add_dspark_metrics(std::span<const uint8_t> loss_mask, std::span<const int32_t> anchors,
                        int64_t block, double gamma, std::span<const float> tv,
                        std::span<const float> conf_logits, DsparkMetricSums& s);

// Acceptance sums over evaluation blocks, additive over micro-batches and workers. A block counts
// when its first drafted slot is trained; a slot is alive while it and every drafted slot before
// it are trained (loss mask, inside the sequence): greedy_run adds the run of alive slots whose
// argmax is the data's token, prob_run adds sum_k prod_{i<=k} alive_i * accept_i with accept_i =
// clamp(1 - tv_i, 0, 1) = sum_v min(p_v, q_v), the chance that slot i's sampled draft survives.
struct AcceptanceSums {
    double blocks = 0;
    double greedy_run = 0;
    double prob_run = 0;
    bool has_prob = false;    // tv was given (the teacher's distribution was computed)
    DsparkMetricSums dspark;  // DSpark drafters (blocks 0 otherwise)
    double tau_greedy() const { return blocks > 0 ? 1.0 + greedy_run / blocks : 0.0; }
    double tau_prob() const { return blocks > 0 && has_prob ? 1.0 + prob_run / blocks : 0.0; }
};

// Adds the blocks of one packed sequence to `s`: block j starts at anchors[j]; its row
// r = j * block + k (k = 1 .. block - 1; k = 0 is the anchor) drafts tokens[anchors[j] + k];
// argmax [N * block] is the draft's choice per row and tv (empty, or [N * block]) the total
// variation distance of its distribution from the target's.
void add_block_acceptance(std::span<const int32_t> tokens, std::span<const uint8_t> loss_mask,
                          std::span<const int32_t> anchors, int64_t block,
                          std::span<const int32_t> argmax, std::span<const float> tv,
                          AcceptanceSums& s);

// Expected acceptance length if block position k were accepted independently with probability
// acc[k-1]: 1 + sum_k prod_{j<=k} acc[j-1] (the bonus token counts 1).
double implied_tau(const std::vector<double>& acc);

nlohmann::json record_json(const StepRecord& r);

// Appends one JSON object per line to a file, flushed after each line so that a killed run keeps
// every record written so far.
class MetricsLog {
  public:
    // Nothing is opened or changed until the first append(): a run refused while it starts up
    // leaves the file as it was. Then, with `keep_through_step`, records after that step are
    // dropped first (truncate_metrics: a resumed run writes them again; 0 drops every record, for
    // a fresh run in a directory whose earlier run never reached a checkpoint).
    explicit MetricsLog(const std::filesystem::path& path,
                        std::optional<int64_t> keep_through_step = std::nullopt);
    ~MetricsLog();
    MetricsLog(const MetricsLog&) = delete;
    MetricsLog& operator=(const MetricsLog&) = delete;
    void append(const StepRecord& r);
    // Records dropped by the first append's truncation.
    int64_t dropped() const { return dropped_; }

  private:
    std::filesystem::path path_;
    std::optional<int64_t> keep_through_step_;
    int64_t dropped_ = 0;
    std::FILE* file_ = nullptr;
};

// A resumed run writes the records after its checkpoint again, so before it appends, its
// metrics file keeps only records with step <= last_step. Lines that do not parse (a run killed
// mid-line) go too. The file is replaced atomically (temp file + rename); a missing file is left
// missing. Returns the number of lines dropped.
int64_t truncate_metrics(const std::filesystem::path& path, int64_t last_step);

// "step 12/300 | loss 3.2101 | acc@1 0.412 | 1234 tok/s | ETA 1m05s" (DFlash2: with the
// selector_summary after tau~)
std::string progress_line(const StepRecord& r);
// "sel 1.2345 recall@16 0.912 tf-acc 0.701 path 2.31 oracle 3.40" (progress and eval lines)
std::string selector_summary(const SelectorMetrics& m);
// "1h02m", "3m05s", "12s"
std::string format_duration(double seconds);

}  // namespace dflash::train

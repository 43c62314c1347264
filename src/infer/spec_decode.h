// The speculative decoding engine (docs/speculative-sampling.md "The decoding step"): target
// prefill, then per step one drafter forward over [anchor, MASK x (B-1)], one target forward
// verifying the block, acceptance of the longest valid prefix plus one target token, and cache
// cropping. With no drafter the same engine decodes plainly (block size 1): that is the baseline
// every speed-up is measured against. Tested by tests/infer/spec_decode_test.cpp.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "infer/sampler.h"
#include "model/drafter.h"
#include "model/target.h"

namespace dflash {

// One speculative step, as `dflash generate --trace` prints it: the drafted tokens, how many of
// them the target accepted, and the token the target added after them (the bonus when every draft
// was accepted, else the correction at the first rejected slot).
struct StepTrace {
    int64_t step = 0;  // 0-based decode step
    std::span<const int32_t> drafted;
    int64_t accepted = 0;
    int32_t next = 0;
    bool bonus() const { return accepted == static_cast<int64_t>(drafted.size()); }
};
using StepTraceSink = std::function<void(const StepTrace&)>;

struct GenerateOptions {
    int64_t max_new_tokens = 256;
    SampleParams sampling;
    bool draft_sampling = false;  // draw drafts from the drafter's distribution instead of argmax
    int64_t block_size = 0;       // 0 = the drafter's block size
    std::vector<int32_t> stop_tokens;
    uint64_t seed = 0;
    int64_t max_context = 0;  // 0 = the target's max_position_embeddings
    // DSpark drafters (infer.dspark_confidence_threshold): > 0 verifies only the drafts before
    // the first slot whose confidence c_k falls below it (drafting itself never stops early);
    // 0 verifies every draft.
    double confidence_threshold = 0;
    // The precision of the drafter's products on a CPU backend (Note [bf16 drafting] in
    // backend/cpu/bf16_linear.h); the output is the target's either way.
    DraftPrecision draft_precision = DraftPrecision::f32;
    // The target's products on a CPU backend through fp32 panels copied from its weights (Note
    // [f32 panels] in backend/cpu/f32_panels.h: the same bits for a decode row and a verify row,
    // and an 8-row verify at a fraction more than a 1-row decode), or its weights in place (no
    // copy). The output is the same tokens either way up to fp32 rounding of near ties.
    bool target_panels = true;
    // The target's decode steps and verify blocks on a CUDA backend through the fused
    // decode-block ops (LayerContext::rows_ops), or through the general ops. Each way keeps a
    // verify row's bits equal to a decode row's; the two differ in rounding.
    bool fused_decode = true;
    StepTraceSink trace;  // called after every speculative step when set
};

enum class StopReason { max_new_tokens, stop_token, context_full };
std::string to_string(StopReason r);

struct GenerateStats {
    int64_t prompt_tokens = 0;
    int64_t new_tokens = 0;
    int64_t steps = 0;  // decode steps after the prefill
    // [B+1]: steps that committed n tokens, n = 1..B. A step commits its a + 1 tokens up to the
    // token budget and through a stop token, so the last step may count fewer than it accepted
    // (the reference decoder's acceptance lengths); sum of n * accept_hist[n] = new_tokens - 1.
    std::vector<int64_t> accept_hist;
    // [B+1]: steps whose verification accepted a drafts, at n = a + 1, counted in full even when
    // the budget or a stop token cut the step short.
    std::vector<int64_t> accepted_hist;
    int64_t drafted = 0;   // drafts proposed, over all steps
    int64_t verified = 0;  // drafts sent to the target (< drafted when a confidence cut applies)
    double prefill_s = 0;  // target prefill (time to first token)
    double draft_s = 0;    // all drafter forwards
    double verify_s = 0;   // all target forwards after the prefill
    double decode_s = 0;   // everything after the prefill
    // Mean tokens committed per step: (new_tokens - 1) / steps, the mean of accept_hist.
    double tau() const;
    // Mean of a + 1 over the steps, counting what the last step accepted past the budget or a
    // stop token: the mean of accepted_hist, >= tau().
    double tau_accepted() const;
};

struct GenerateResult {
    std::vector<int32_t> tokens;  // generated tokens only (stop token included when hit)
    GenerateStats stats;
    StopReason stop = StopReason::max_new_tokens;
};

// Called with the tokens committed by each step, as soon as they are committed.
using TokenSink = std::function<void(std::span<const int32_t>)>;

class SpeculativeEngine {
  public:
    // drafter == nullptr: plain decoding with the same engine.
    SpeculativeEngine(const TargetModel& target, const DrafterModel* drafter, Backend& be);
    ~SpeculativeEngine();
    SpeculativeEngine(SpeculativeEngine&&) noexcept;
    // Not const: the engine keeps its sessions and step buffers between calls while they fit, so
    // the steps a CUDA backend recorded for one prompt are replayed for the next. Drafting in bf16
    // multiplies with copies of the drafter's weights made at the first such call: make a new
    // engine after changing the weights.
    GenerateResult generate(std::span<const int32_t> prompt, const GenerateOptions& opt,
                            const TokenSink& sink = {});
    Backend& backend() const { return be_; }
    const DrafterModel* drafter() const { return drafter_; }  // null: plain decoding
    // What the last generate() drafted in: "f32", "bf16 copies" (the drafter's weights copied
    // to bf16 for the backend's bf16 product) or "bf16" (the backend's own compute type); "" before
    // any or without a drafter.
    const std::string& draft_precision() const { return draft_precision_; }
    // Whether the last generate() multiplied the target through fp32 panels.
    bool target_panels() const { return target_panels_; }
    // Whether the last generate() ran the target's decode and verify through the fused ops.
    bool fused_decode() const { return fused_decode_; }

    struct Sessions;  // spec_decode.cpp

  private:
    // Sessions for `capacity` positions and block size B (made anew when the kept ones are
    // too small or differently shaped, or drafting changed precision, or the target's copies).
    Sessions& sessions(int64_t capacity, int64_t B, DraftPrecision precision, bool target_panels,
                       bool fused_decode);
    // The drafter's bf16 copies for `precision` (null: f32), made at the first call that needs
    // them; an error when bf16 is asked of a CPU without a bf16 product.
    const PreparedWeights* draft_weights(DraftPrecision precision);
    // The target's fp32 panels when `panels` and the backend makes them (null: in place), made at
    // the first such call.
    const PreparedWeights* target_weights(bool panels);

    const TargetModel& target_;
    const DrafterModel* drafter_;
    Backend& be_;
    std::unique_ptr<Sessions> kept_;
    std::unique_ptr<PreparedWeights> draft_weights_;  // behind a pointer: sessions keep its address
    std::unique_ptr<PreparedWeights> target_weights_;  // likewise
    std::string draft_precision_;
    bool target_panels_ = false;
    bool fused_decode_ = false;
};

}  // namespace dflash

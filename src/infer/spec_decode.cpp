// Speculative decoding engine. Tested by tests/infer/spec_decode_test.cpp and (DSpark drafters)
// tests/infer/dspark_decode_test.cpp.
#include "infer/spec_decode.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>

#include "infer/acceptance.h"
#include "infer/selector_walk.h"
#include "model/candidate_selector.h"
#include "model/dspark_heads.h"

namespace dflash {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::span<const float> row(const HostTensor& t, int64_t r) {
    return {t.f32() + r * t.dim(1), static_cast<size_t>(t.dim(1))};
}

// Turns device logits into tokens on the host: greedy rows through an argmax on the device (a few
// integers cross the bus); sampling rows as whole logits rows (the sampler and the acceptance rule
// run on the host).
class Picker {
  public:
    Picker(Backend& be, int64_t rows, int64_t vocab)
        : be_(be),
          rows_(rows),
          vocab_(vocab),
          argmax_(be, {rows}, DType::i32),
          ids_({rows}, DType::i32),
          u_dev_(be, {1}, DType::f32),
          u_host_({1}) {}

    // Index of the largest logit of each of the first n rows.
    std::span<const int32_t> argmax(const Tensor& logits, int64_t n) {
        be_.argmax_rows(logits.rows(0, n), argmax_.view().rows(0, n));
        be_.download(ids_.view().rows(0, n), argmax_.view().rows(0, n));
        return {ids_.i32(), static_cast<size_t>(n)};
    }
    // The first n rows on the host.
    const HostTensor& fetch(const Tensor& logits, int64_t n) {
        if (logits_.empty()) logits_ = HostTensor({rows_, vocab_});  // sampling only
        be_.download(logits_.view().rows(0, n), logits.rows(0, n));
        return logits_;
    }
    // One token from the first row: the argmax, or a draw from the sampling distribution on the
    // device (one uniform up, one id down; the row itself never crosses).
    int32_t sample(const Tensor& logits, const SampleParams& p, Rng& rng) {
        if (p.greedy()) return argmax(logits, 1)[0];
        const auto u = static_cast<float>(rng.uniform_f64());
        u_host_.f32()[0] = std::min(u, std::nextafter(1.0f, 0.0f));
        be_.upload(u_dev_, u_host_.view());
        be_.sample_rows(logits.rows(0, 1), p, u_dev_, argmax_.view().rows(0, 1));
        be_.download(ids_.view().rows(0, 1), argmax_.view().rows(0, 1));
        return ids_.i32()[0];
    }

  private:
    Backend& be_;
    int64_t rows_, vocab_;
    DeviceTensor argmax_;  // i32 [rows]
    HostTensor ids_;       // i32 [rows]
    HostTensor logits_;    // f32 [rows, V]
    DeviceTensor u_dev_;   // f32 [1]: the uniform of a device-side draw
    HostTensor u_host_;
};

// The tokens one draft of block size B proposes (DSpark's anchor slot predicts too) and, one more,
// the tokens a verify forward sees.
int64_t drafts_of(const DrafterModel* drafter, int64_t B) {
    return drafter && drafter->config().dspark() ? B : B - 1;
}

}  // namespace

// What decoding keeps between generate() calls: sessions and the step buffers whose addresses
// the recorded steps bake in.
struct SpeculativeEngine::Sessions {
    Sessions(const TargetModel& target, const DrafterModel* drafter, Backend& be,
             int64_t cache_rows, int64_t block, int64_t prefill_rows,
             const PreparedWeights* prepared_weights, const PreparedWeights* target_weights,
             bool fused)
        : capacity(cache_rows),
          B(block),
          verify(drafter ? drafts_of(drafter, block) + 1 : block),
          prepared(prepared_weights),
          target_prepared(target_weights),
          fused_decode(fused),
          tgt(target, be, cache_rows,
              drafter ? drafter->config().target_layer_ids : std::vector<int64_t>{},
              std::max(prefill_rows, verify), target_weights, fused),
          pick(be, std::max<int64_t>(verify, 1), target.config().vocab_size),
          logits(be, {verify, target.config().vocab_size}, DType::f32) {
        if (!drafter) return;
        dft.emplace(*drafter, be, target.embed(), target.lm_head(), capacity, B, prefill_rows,
                    prepared);
        if (drafter->config().dflash2()) sel.emplace(*drafter, be, B - 1);
        if (drafter->config().dspark())
            head.emplace(be, drafter->params(), drafter->config().ds, drafter->dims().D, B);
        draft_logits = DeviceTensor(be, {verify - 1, target.config().vocab_size}, DType::f32);
        verify_features = DeviceTensor(be, {verify, drafter->feature_dim()}, be.compute_dtype());
    }
    int64_t capacity, B;
    int64_t verify;                   // tokens of a verify forward: the anchor and every draft
    const PreparedWeights* prepared;  // what the drafter session multiplies with
    const PreparedWeights* target_prepared;  // what the target session multiplies with
    bool fused_decode;                       // the target session's rows_ops
    TargetSession tgt;
    std::optional<DrafterSession> dft;
    std::optional<CandidateSelector> sel;  // DFlash2 drafters
    std::optional<DsparkSlotHead> head;    // DSpark drafters
    Picker pick;
    DeviceTensor logits;        // f32 [verify, V]: the target's (the first row in plain decoding)
    DeviceTensor draft_logits;  // f32 [verify-1, V]
    DeviceTensor verify_features;  // [verify, K*D]
};

namespace {

// One generate() call's decoding state: what the loops read and the result they fill.
struct Decode {
    const GenerateOptions& opt;       // as given: sampling, draft sampling, stop tokens
    const GenerateOptions& budgeted;  // opt with max_new_tokens clipped to the context
    const TokenSink& sink;
    TargetSession& tgt;
    Backend& be;
    Picker& pick;
    Rng& rng;
    GenerateResult& res;
    int64_t B;       // block size (1: plain decoding)
    int64_t V;       // vocabulary
    int64_t drafts;  // drafts per step: B - 1, or B for DSpark

    // Commits tokens to the result, honouring stop tokens and the token budget. Returns false
    // when generation must end.
    bool commit(std::span<const int32_t> toks) {
        size_t n = 0;
        bool done = false;
        for (int32_t t : toks) {
            if (static_cast<int64_t>(res.tokens.size()) >= budgeted.max_new_tokens) {
                res.stop = StopReason::max_new_tokens;
                done = true;
                break;
            }
            res.tokens.push_back(t);
            ++n;
            const auto& stop = budgeted.stop_tokens;
            if (std::find(stop.begin(), stop.end(), t) != stop.end()) {
                res.stop = StopReason::stop_token;
                done = true;
                break;
            }
        }
        if (!done && static_cast<int64_t>(res.tokens.size()) >= budgeted.max_new_tokens) {
            res.stop = StopReason::max_new_tokens;
            done = true;
        }
        if (sink && n > 0) sink(std::span(res.tokens).last(n));
        return !done;
    }
};

// The baseline: one target forward per token.
void decode_plain(Decode& run, const Tensor& logits, int32_t anchor) {
    GenerateStats& st = run.res.stats;
    do {
        const auto t0 = Clock::now();
        run.tgt.forward(std::span(&anchor, 1), logits, Tensor());
        anchor = run.pick.sample(logits, run.opt.sampling, run.rng);
        st.verify_s += seconds_since(t0);
        st.steps += 1;
        st.accept_hist[1] += 1;
        st.accepted_hist[1] += 1;
    } while (run.commit(std::span(&anchor, 1)));
}

// The drafts of one block: argmax on the device, or samples from the drafter's distribution (then
// draft_probs holds that distribution per draft, for the acceptance rule).
void choose_drafts(Decode& run, const Tensor& draft_logits, std::vector<int32_t>& drafts,
                   std::vector<std::vector<double>>& draft_probs) {
    const int64_t n = run.drafts;
    draft_probs.clear();
    if (run.opt.draft_sampling && !run.opt.sampling.greedy()) {
        const HostTensor& host = run.pick.fetch(draft_logits, n);
        for (int64_t i = 0; i < n; ++i) {
            draft_probs.push_back(sampling_probs(row(host, i), run.opt.sampling));
            drafts[i] = sample_from(draft_probs.back(), run.rng);
        }
        return;
    }
    const auto ids = run.pick.argmax(draft_logits, n);
    std::copy(ids.begin(), ids.end(), drafts.begin());
}

// DFlash2 (docs/formats.md "DFlash2 drafter directory"): the selector's walk over the block's
// candidate lattice from the anchor; greedy, or sampled from q = softmax(S / T) over the K
// candidates (draft_probs then holds that q scattered onto the vocabulary, which the acceptance
// rule's residual needs).
void choose_dflash2_drafts(Decode& run, const DrafterSession& dft, CandidateSelector& sel,
                           const Tensor& draft_logits, int32_t anchor, std::vector<int32_t>& drafts,
                           std::vector<std::vector<double>>& draft_probs) {
    const int64_t n = run.B - 1;
    draft_probs.clear();
    CandidateLattice lat;
    sel.select(draft_logits.rows(0, n), dft.selector_z(run.B), anchor, lat);
    if (run.opt.draft_sampling && !run.opt.sampling.greedy()) {
        const SelectorPath path = sampled_walk(lat, run.opt.sampling.temperature, run.rng);
        for (int64_t i = 0; i < n; ++i) draft_probs.push_back(scatter_q(lat, path, i, run.V));
        std::copy(path.tokens.begin(), path.tokens.end(), drafts.begin());
        return;
    }
    const SelectorPath path = greedy_walk(lat);
    std::copy(path.tokens.begin(), path.tokens.end(), drafts.begin());
}

// DSpark (docs/speculative-sampling.md "DSpark drafters"): slot by slot, the Markov bias of the
// token chosen before it (the anchor for slot 0) is added to the slot's logits row, then the
// draft is its argmax or a sample of softmax(row / T), whose distribution (the very q drawn from)
// goes to the acceptance rule. Returns how many drafts to verify: all, or with a confidence
// threshold those before the first slot whose confidence falls below it.
int64_t choose_dspark_drafts(Decode& run, DsparkSlotHead& head, const Tensor& hidden,
                             const Tensor& draft_logits, int32_t anchor,
                             std::vector<int32_t>& drafts,
                             std::vector<std::vector<double>>& draft_probs) {
    draft_probs.clear();
    const bool sample = run.opt.draft_sampling && !run.opt.sampling.greedy();
    const double threshold = run.opt.confidence_threshold;
    int64_t verify = run.drafts;
    int32_t prev = anchor;
    for (int64_t k = 0; k < run.drafts; ++k) {
        const Tensor row_k = draft_logits.rows(k, k + 1);
        const double c = head.apply(k, hidden.rows(k, k + 1), prev, row_k, threshold > 0);
        if (threshold > 0 && c < threshold && verify == run.drafts) verify = k;
        if (sample) {
            const HostTensor& host = run.pick.fetch(row_k, 1);
            draft_probs.push_back(sampling_probs(row(host, 0), run.opt.sampling));
            drafts[k] = sample_from(draft_probs.back(), run.rng);
        } else {
            drafts[k] = run.pick.argmax(row_k, 1)[0];
        }
        prev = drafts[k];
    }
    return verify;
}

// docs/speculative-sampling.md "The decoding step": draft B-1 tokens after the anchor in one
// drafter forward, verify the block in one target forward, keep the accepted prefix and the
// target's next token, crop the target cache and hand the kept rows' features to the drafter's
// context.
void decode_speculative(Decode& run, SpeculativeEngine::Sessions& ss, const Tensor& prompt_features,
                        int32_t anchor) {
    const int64_t B = run.B;
    const GenerateOptions& opt = run.opt;
    GenerateStats& st = run.res.stats;
    DrafterSession& dft = *ss.dft;
    CandidateSelector* sel = ss.sel ? &*ss.sel : nullptr;
    const Tensor logits = ss.logits.view(), draft_logits = ss.draft_logits.view();
    const Tensor verify_features = ss.verify_features.view();
    Tensor pending = prompt_features;
    const int64_t n = run.drafts;
    std::vector<int32_t> block(n + 1);
    std::vector<int32_t> all_drafts(n), target_argmax(n + 1);
    std::vector<std::vector<double>> target_probs(n + 1), draft_probs;
    bool go = true;
    while (go) {
        const auto t0 = Clock::now();
        dft.draft(pending, anchor, draft_logits, B);
        int64_t m = n;  // drafts verified
        if (sel) {
            choose_dflash2_drafts(run, dft, *sel, draft_logits, anchor, all_drafts, draft_probs);
        } else if (ss.head) {
            m = choose_dspark_drafts(run, *ss.head, dft.dspark_hidden(B), draft_logits, anchor,
                                     all_drafts, draft_probs);
        } else {
            choose_drafts(run, draft_logits, all_drafts, draft_probs);
        }
        const auto t1 = Clock::now();
        st.draft_s += std::chrono::duration<double>(t1 - t0).count();
        st.drafted += n;
        st.verified += m;
        const std::span<const int32_t> drafts(all_drafts.data(), static_cast<size_t>(m));
        if (!draft_probs.empty()) draft_probs.resize(static_cast<size_t>(m));
        block.resize(static_cast<size_t>(m + 1));
        target_probs.resize(static_cast<size_t>(m + 1));
        block[0] = anchor;
        std::copy(drafts.begin(), drafts.end(), block.begin() + 1);
        const int64_t start = run.tgt.length();
        // Hybrid targets (docs/engine.md "Verify rollback of hybrid targets"): this forward also
        // checkpoints every Gated DeltaNet state (one state read + write per linear layer) and
        // saves the block's recurrence inputs (~48 KiB a row per layer at Qwen3.5-35B-A3B
        // geometry); the crop below restores the checkpoint and replays the a + 1 kept rows (one
        // more state read + write), instead of storing B states per layer.
        run.tgt.forward(block, logits.rows(0, m + 1), verify_features.rows(0, m + 1));
        VerifyOutcome v;
        if (opt.sampling.greedy()) {
            const auto ids = run.pick.argmax(logits, m + 1);
            std::copy(ids.begin(), ids.end(), target_argmax.begin());
            v = verify_greedy(drafts, std::span(target_argmax).first(static_cast<size_t>(m + 1)));
        } else {
            const HostTensor& host = run.pick.fetch(logits, m + 1);
            for (int64_t i = 0; i <= m; ++i)
                target_probs[i] = sampling_probs(row(host, i), opt.sampling);
            v = verify_sampled(drafts, target_probs, draft_probs, run.rng);
        }
        st.verify_s += seconds_since(t1);
        const int64_t a = v.accepted;
        run.tgt.crop(start + a + 1);  // anchor + accepted drafts stay; the next anchor is `next`
        pending = verify_features.rows(0, a + 1);
        if (opt.trace) opt.trace(StepTrace{st.steps, drafts, a, v.next});
        st.steps += 1;
        st.accepted_hist[a + 1] += 1;
        std::vector<int32_t> committed(drafts.begin(), drafts.begin() + a);
        committed.push_back(v.next);
        anchor = v.next;
        const size_t before = run.res.tokens.size();
        go = run.commit(committed);
        st.accept_hist[run.res.tokens.size() - before] += 1;
    }
}

}  // namespace

std::string to_string(StopReason r) {
    switch (r) {
        case StopReason::max_new_tokens:
            return "max_new_tokens";
        case StopReason::stop_token:
            return "stop_token";
        case StopReason::context_full:
            return "context_full";
    }
    return "?";
}

double GenerateStats::tau() const {
    return steps > 0 ? static_cast<double>(new_tokens - 1) / static_cast<double>(steps) : 0.0;
}

double GenerateStats::tau_accepted() const {
    int64_t tokens = 0;
    for (size_t n = 0; n < accepted_hist.size(); ++n)
        tokens += static_cast<int64_t>(n) * accepted_hist[n];
    return steps > 0 ? static_cast<double>(tokens) / static_cast<double>(steps) : 0.0;
}

SpeculativeEngine::~SpeculativeEngine() = default;
SpeculativeEngine::SpeculativeEngine(SpeculativeEngine&&) noexcept = default;

const PreparedWeights* SpeculativeEngine::draft_weights(DraftPrecision precision) {
    const bool own_bf16 = be_.compute_dtype() == DType::bf16;
    if (!drafter_ || precision == DraftPrecision::f32 || own_bf16) {
        draft_precision_ = !drafter_ ? "" : own_bf16 ? "bf16" : "f32";
        return nullptr;
    }
    if (!draft_weights_) {
        std::vector<Tensor> w = drafter_->linear_weights();
        w.push_back(target_.lm_head());
        draft_weights_ = std::make_unique<PreparedWeights>(be_, w);
    }
    DF_CHECK(precision != DraftPrecision::bf16 || draft_weights_->count() > 0,
             "infer.cpu_draft_precision = bf16, but the {} backend has no bf16 product here (on "
             "the CPU it needs AVX-512); use auto or f32",
             be_.name());
    draft_precision_ = draft_weights_->count() > 0 ? "bf16 copies" : "f32";
    return draft_weights_->count() > 0 ? draft_weights_.get() : nullptr;
}

const PreparedWeights* SpeculativeEngine::target_weights(bool panels) {
    if (panels && !target_weights_) {
        // Decided once per engine. The panels are a second f32 copy of the target's linear
        // weights: worth it for the small targets a CPU decodes, never allowed to double a large
        // one's memory (an empty set: read in place).
        constexpr int64_t kMaxPanelBytes = int64_t{1} << 30;
        std::vector<Tensor> weights = target_.linear_weights();
        int64_t bytes = 0;
        for (const Tensor& w : weights) bytes += w.numel() * 4;
        if (bytes > kMaxPanelBytes) weights.clear();
        target_weights_ = std::make_unique<PreparedWeights>(be_, weights, WeightCopy::f32);
    }
    target_panels_ = panels && target_weights_->count() > 0;
    return target_panels_ ? target_weights_.get() : nullptr;
}

SpeculativeEngine::Sessions& SpeculativeEngine::sessions(int64_t capacity, int64_t B,
                                                         DraftPrecision precision,
                                                         bool target_panels, bool fused_decode) {
    const PreparedWeights* prepared = draft_weights(precision);
    const PreparedWeights* target_prepared = target_weights(target_panels);
    // The fused decode-block ops are the CUDA kernels' way; the CPU has only their references.
    fused_decode_ = fused_decode && be_.device().kind == DeviceKind::cuda;
    // Prefills longer than this run in pieces (each piece's activations fit one workspace).
    constexpr int64_t kPrefillRows = 512;
    // Capacities grow in steps, so prompts of similar lengths share sessions (and graphs).
    constexpr int64_t kCapacityStep = 256;
    if (!kept_ || kept_->capacity < capacity || kept_->B != B || kept_->prepared != prepared ||
        kept_->target_prepared != target_prepared || kept_->fused_decode != fused_decode_) {
        kept_.reset();  // its memory goes before the new sessions take theirs
        const int64_t cap = (capacity + kCapacityStep - 1) / kCapacityStep * kCapacityStep;
        kept_ = std::make_unique<Sessions>(target_, drafter_, be_, cap, B, kPrefillRows, prepared,
                                           target_prepared, fused_decode_);
    }
    kept_->tgt.crop(0);
    if (kept_->dft) kept_->dft->crop(0);
    return *kept_;
}

SpeculativeEngine::SpeculativeEngine(const TargetModel& target, const DrafterModel* drafter,
                                     Backend& be)
    : target_(target), drafter_(drafter), be_(be) {
    DF_CHECK(target.backend().device() == be.device() &&
                 (!drafter || drafter->backend().device() == be.device()),
             "the engine runs on {} but the target lives on {}{}", be.name(),
             to_string(target.backend().device()),
             drafter ? " and the drafter on " + to_string(drafter->backend().device()) : "");
    if (drafter_) {
        const auto problems = drafter_target_mismatches(drafter_->config(), target_.config());
        DF_CHECK(problems.empty(), "the drafter does not fit this target: {}",
                 problems.empty() ? "" : problems.front());
    }
}

GenerateResult SpeculativeEngine::generate(std::span<const int32_t> prompt,
                                           const GenerateOptions& opt, const TokenSink& sink) {
    const int64_t P = static_cast<int64_t>(prompt.size());
    const int64_t V = target_.config().vocab_size;
    DF_CHECK(P > 0, "the prompt is empty: at least one token is needed to start decoding");
    DF_CHECK(opt.max_new_tokens > 0, "max_new_tokens={} must be at least 1", opt.max_new_tokens);
    const int64_t B = drafter_ ? (opt.block_size > 0 ? opt.block_size : drafter_->block_size()) : 1;
    DF_CHECK(B >= 1 && (!drafter_ || B >= 2),
             "block size {} is too small for speculative decoding (need >= 2)", B);
    // The convolution's taps and the selector were trained on whole blocks of that size
    // (docs/formats.md "DFlash2 drafter directory"): a DFlash2 drafter is served at its own block
    // size only.
    DF_CHECK(!drafter_ || !drafter_->config().dflash2() || B == drafter_->block_size(),
             "block size {} but this DFlash2 drafter was trained with block_size {}; DFlash2 "
             "drafters decode at their own block size only (set infer.block_size to 0 or {})",
             B, drafter_->block_size(), drafter_->block_size());
    const int64_t max_ctx =
        opt.max_context > 0 ? opt.max_context : target_.config().max_position_embeddings;
    DF_CHECK(P < max_ctx,
             "the prompt has {} tokens but the context holds {}: shorten the prompt or raise "
             "infer.max_context",
             P, max_ctx);

    // Plain decoding (no drafter: `dflash bench`'s baseline) has nothing to cut.
    DF_CHECK(opt.confidence_threshold <= 0 || !drafter_ || drafter_->config().dspark(),
             "infer.dspark_confidence_threshold={} needs a DSpark drafter with a confidence head",
             opt.confidence_threshold);
    DF_CHECK(opt.confidence_threshold <= 0 || !drafter_ || drafter_->config().ds.confidence_head,
             "infer.dspark_confidence_threshold={} but this DSpark drafter has no confidence head "
             "(enable_confidence_head false)",
             opt.confidence_threshold);
    // Tokens a verify forward sees: the anchor and the drafts (B - 1, or B for DSpark).
    const int64_t verify = drafter_ ? drafts_of(drafter_, B) + 1 : 1;

    GenerateResult res;
    GenerateStats& st = res.stats;
    st.prompt_tokens = P;
    st.accept_hist.assign(verify + 1, 0);
    st.accepted_hist.assign(verify + 1, 0);
    // Positions P .. max_ctx-1 can be generated; the verify block may reach past the last one.
    const int64_t budget = std::min(opt.max_new_tokens, max_ctx - P);
    GenerateOptions budgeted = opt;
    budgeted.max_new_tokens = budget;
    Sessions& ss = sessions(P + budget + std::max(B, verify), B, opt.draft_precision,
                            opt.target_panels, opt.fused_decode);
    TargetSession& tgt = ss.tgt;
    const int64_t KD = drafter_ ? drafter_->feature_dim() : 0;
    Rng rng(opt.seed);
    Decode run{opt, budgeted, sink, tgt, be_, ss.pick, rng, res, B, V, verify - 1};

    const auto t_prefill = Clock::now();
    DeviceTensor prompt_features;
    if (drafter_) prompt_features = DeviceTensor(be_, {P, KD}, be_.compute_dtype());
    const Tensor first_logits = ss.logits.view().rows(0, 1);
    tgt.forward(prompt, first_logits, prompt_features);
    const int32_t anchor = ss.pick.sample(first_logits, opt.sampling, rng);
    st.prefill_s = seconds_since(t_prefill);
    const auto t_decode = Clock::now();
    if (run.commit(std::span(&anchor, 1))) {
        if (drafter_)
            decode_speculative(run, ss, prompt_features, anchor);
        else
            decode_plain(run, first_logits, anchor);
    }
    st.decode_s = seconds_since(t_decode);
    st.new_tokens = static_cast<int64_t>(res.tokens.size());
    if (res.stop == StopReason::max_new_tokens && budget < opt.max_new_tokens)
        res.stop = StopReason::context_full;
    return res;
}

}  // namespace dflash

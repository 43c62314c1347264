// Speculative decoding engine. Tested by tests/infer/spec_decode_test.cpp.
#include "infer/spec_decode.h"

#include <algorithm>
#include <chrono>

#include "infer/acceptance.h"

namespace dflash {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::span<const float> row(const Tensor& t, int64_t r) {
    return {t.f32() + r * t.dim(1), static_cast<size_t>(t.dim(1))};
}

// One generate() call's decoding state: what the loops read and the result they fill.
struct Decode {
    const GenerateOptions& opt;       // as given: sampling, draft sampling, stop tokens
    const GenerateOptions& budgeted;  // opt with max_new_tokens clipped to the context
    const TokenSink& sink;
    TargetSession& tgt;
    Rng& rng;
    GenerateResult& res;
    int64_t B;  // block size (1: plain decoding)
    int64_t V;  // vocabulary

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
void decode_plain(Decode& run, int32_t anchor) {
    GenerateStats& st = run.res.stats;
    HostTensor logits({1, run.V});
    do {
        const auto t0 = Clock::now();
        run.tgt.forward(std::span(&anchor, 1), logits, Tensor());
        st.verify_s += seconds_since(t0);
        anchor = sample_token(row(logits, 0), run.opt.sampling, run.rng);
        st.steps += 1;
        st.accept_hist[1] += 1;
    } while (run.commit(std::span(&anchor, 1)));
}

// dflash-spec §2.2: draft B-1 tokens after the anchor in one drafter forward, verify the block in
// one target forward, keep the accepted prefix and the target's next token, crop the target cache
// and hand the kept rows' features to the drafter's context.
void decode_speculative(Decode& run, DrafterSession& dft, const Tensor& prompt_features,
                        int32_t anchor) {
    const int64_t B = run.B;
    const GenerateOptions& opt = run.opt;
    GenerateStats& st = run.res.stats;
    HostTensor logits({B, run.V});
    HostTensor draft_logits({B - 1, run.V});
    HostTensor verify_features({B, prompt_features.dim(1)});
    Tensor pending = prompt_features;
    std::vector<int32_t> block(B);
    std::vector<int32_t> drafts(B - 1), target_argmax(B);
    std::vector<std::vector<double>> target_probs(B), draft_probs;
    bool go = true;
    while (go) {
        const auto t0 = Clock::now();
        dft.draft(pending, anchor, draft_logits, B);
        const auto t1 = Clock::now();
        st.draft_s += std::chrono::duration<double>(t1 - t0).count();
        draft_probs.clear();
        for (int64_t i = 0; i < B - 1; ++i) {
            if (opt.draft_sampling && !opt.sampling.greedy()) {
                draft_probs.push_back(sampling_probs(row(draft_logits, i), opt.sampling));
                drafts[i] = sample_from(draft_probs.back(), run.rng);
            } else {
                drafts[i] = argmax(row(draft_logits, i));
            }
        }
        block[0] = anchor;
        std::copy(drafts.begin(), drafts.end(), block.begin() + 1);
        const int64_t start = run.tgt.length();
        run.tgt.forward(block, logits, verify_features);
        st.verify_s += seconds_since(t1);
        VerifyOutcome v;
        if (opt.sampling.greedy()) {
            for (int64_t i = 0; i < B; ++i) target_argmax[i] = argmax(row(logits, i));
            v = verify_greedy(drafts, target_argmax);
        } else {
            for (int64_t i = 0; i < B; ++i)
                target_probs[i] = sampling_probs(row(logits, i), opt.sampling);
            v = verify_sampled(drafts, target_probs, draft_probs, run.rng);
        }
        const int64_t a = v.accepted;
        run.tgt.crop(start + a + 1);  // anchor + accepted drafts stay; the next anchor is `next`
        pending = verify_features.view().rows(0, a + 1);
        st.steps += 1;
        st.accept_hist[a + 1] += 1;
        std::vector<int32_t> committed(drafts.begin(), drafts.begin() + a);
        committed.push_back(v.next);
        anchor = v.next;
        go = run.commit(committed);
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

SpeculativeEngine::SpeculativeEngine(const TargetModel& target, const DrafterModel* drafter,
                                     Backend& be)
    : target_(target), drafter_(drafter), be_(be) {
    if (drafter_) {
        const auto problems = drafter_target_mismatches(drafter_->config(), target_.config());
        DF_CHECK(problems.empty(), "the drafter does not fit this target: {}",
                 problems.empty() ? "" : problems.front());
    }
}

GenerateResult SpeculativeEngine::generate(std::span<const int32_t> prompt,
                                           const GenerateOptions& opt,
                                           const TokenSink& sink) const {
    const int64_t P = static_cast<int64_t>(prompt.size());
    const int64_t V = target_.config().vocab_size;
    DF_CHECK(P > 0, "the prompt is empty: at least one token is needed to start decoding");
    DF_CHECK(opt.max_new_tokens > 0, "max_new_tokens={} must be at least 1", opt.max_new_tokens);
    const int64_t B = drafter_ ? (opt.block_size > 0 ? opt.block_size : drafter_->block_size()) : 1;
    DF_CHECK(B >= 1 && (!drafter_ || B >= 2),
             "block size {} is too small for speculative decoding (need >= 2)", B);
    const int64_t max_ctx =
        opt.max_context > 0 ? opt.max_context : target_.config().max_position_embeddings;
    DF_CHECK(P < max_ctx,
             "the prompt has {} tokens but the context holds {}: shorten the prompt or raise "
             "infer.max_context",
             P, max_ctx);

    GenerateResult res;
    GenerateStats& st = res.stats;
    st.prompt_tokens = P;
    st.accept_hist.assign(B + 1, 0);
    // Positions P .. max_ctx-1 can be generated; the verify block may reach B-1 past the last one.
    const int64_t budget = std::min(opt.max_new_tokens, max_ctx - P);
    GenerateOptions budgeted = opt;
    budgeted.max_new_tokens = budget;
    const int64_t capacity = P + budget + B;
    const std::vector<int64_t> capture =
        drafter_ ? drafter_->config().target_layer_ids : std::vector<int64_t>{};
    TargetSession tgt(target_, be_, capacity, capture);
    const int64_t KD = drafter_ ? drafter_->feature_dim() : 0;
    Rng rng(opt.seed);
    Decode run{opt, budgeted, sink, tgt, rng, res, B, V};

    const auto t_prefill = Clock::now();
    HostTensor prompt_features(drafter_ ? Shape{P, KD} : Shape{0});
    HostTensor prompt_last({1, V});
    {
        HostTensor all({P, V});
        tgt.forward(prompt, all, drafter_ ? prompt_features.view() : Tensor());
        copy_tensor(prompt_last.view(), all.view().rows(P - 1, P));
    }
    const int32_t anchor = sample_token(row(prompt_last, 0), opt.sampling, rng);
    st.prefill_s = seconds_since(t_prefill);
    const auto t_decode = Clock::now();
    if (run.commit(std::span(&anchor, 1))) {
        if (drafter_) {
            DrafterSession dft(*drafter_, be_, target_.embed(), target_.lm_head(), capacity, B);
            decode_speculative(run, dft, prompt_features, anchor);
        } else {
            decode_plain(run, anchor);
        }
    }
    st.decode_s = seconds_since(t_decode);
    st.new_tokens = static_cast<int64_t>(res.tokens.size());
    if (res.stop == StopReason::max_new_tokens && budget < opt.max_new_tokens)
        res.stop = StopReason::context_full;
    return res;
}

}  // namespace dflash

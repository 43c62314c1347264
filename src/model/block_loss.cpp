// Block-row losses of drafter training (see block_loss.h). Tested by
// tests/model/block_loss_test.cpp and tests/model/drafter_test.cpp.
#include "model/block_loss.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace dflash {
namespace {

constexpr LossKind kKinds[] = {LossKind::ce,  LossKind::kl, LossKind::rkl,
                               LossKind::jsd, LossKind::tv, LossKind::l1};
constexpr const char* kChoices =
    "ce (cross-entropy on the data's tokens), kl (KL(p_target || q_draft)), rkl (KL(q || p)), "
    "jsd (Jensen-Shannon), tv (total variation |p - q|_1 / 2), l1 (|p - q|_1), or a weighted sum "
    "such as 0.1*ce+0.9*l1";

std::string trimmed(const std::string& s) {
    size_t b = 0, e = s.size();
    while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
    return s.substr(b, e - b);
}

LossKind parse_kind(const std::string& name, const std::string& text) {
    for (LossKind k : kKinds)
        if (name == loss_kind_name(k)) return k;
    DF_FAIL("train.loss='{}': '{}' is not a loss; expected {}", text, name, kChoices);
}

}  // namespace

const char* loss_kind_name(LossKind kind) {
    switch (kind) {
        case LossKind::ce:
            return "ce";
        case LossKind::kl:
            return "kl";
        case LossKind::rkl:
            return "rkl";
        case LossKind::jsd:
            return "jsd";
        case LossKind::tv:
            return "tv";
        case LossKind::l1:
            return "l1";
    }
    return "?";
}

double LossMix::weight(LossKind kind) const {
    for (const LossTerm& t : terms)
        if (t.kind == kind) return t.weight;
    return 0.0;
}

bool LossMix::needs_teacher() const {
    return std::any_of(terms.begin(), terms.end(),
                       [](const LossTerm& t) { return t.kind != LossKind::ce; });
}

LmHeadDivergences LossMix::divergences() const {
    LmHeadDivergences d;
    d.kl = static_cast<float>(weight(LossKind::kl));
    d.rkl = static_cast<float>(weight(LossKind::rkl));
    d.jsd = static_cast<float>(weight(LossKind::jsd));
    d.tv = static_cast<float>(weight(LossKind::tv) + 2.0 * weight(LossKind::l1));
    return d;
}

std::string LossMix::name() const {
    if (terms.size() == 1 && terms[0].weight == 1.0) return loss_kind_name(terms[0].kind);
    std::string out;
    for (const LossTerm& t : terms) {
        if (!out.empty()) out += '+';
        out += fmt::format("{:g}*{}", t.weight, loss_kind_name(t.kind));
    }
    return out;
}

LossMix parse_loss_mix(const std::string& text) {
    LossMix mix;
    mix.terms.clear();
    size_t at = 0;
    while (true) {
        const size_t plus = text.find('+', at);
        const std::string term =
            trimmed(text.substr(at, plus == std::string::npos ? std::string::npos : plus - at));
        DF_CHECK(!term.empty(), "train.loss='{}' has an empty term; expected {}", text, kChoices);
        LossTerm t;
        const size_t star = term.find('*');
        if (star == std::string::npos) {
            t.kind = parse_kind(term, text);
        } else {
            const std::string w = trimmed(term.substr(0, star));
            char* end = nullptr;
            t.weight = std::strtod(w.c_str(), &end);
            DF_CHECK(!w.empty() && end == w.c_str() + w.size() && std::isfinite(t.weight) &&
                         t.weight > 0.0,
                     "train.loss='{}': the weight '{}' is not a finite number > 0", text, w);
            t.kind = parse_kind(trimmed(term.substr(star + 1)), text);
        }
        DF_CHECK(mix.weight(t.kind) == 0.0, "train.loss='{}' names {} twice", text,
                 loss_kind_name(t.kind));
        mix.terms.push_back(t);
        if (plus == std::string::npos) break;
        at = plus + 1;
    }
    return mix;
}

LossWeighting parse_loss_weighting(const std::string& name) {
    if (name == "decay") return LossWeighting::decay;
    if (name == "dpace") return LossWeighting::dpace;
    DF_FAIL(
        "train.loss_weighting='{}' is not a weighting; expected decay (exp(-(k-1)/gamma)) or "
        "dpace (D-PACE, from the draft's own probabilities)",
        name);
}

const char* loss_weighting_name(LossWeighting weighting) {
    return weighting == LossWeighting::dpace ? "dpace" : "decay";
}

int32_t teacher_position(int64_t anchor, int64_t k, int64_t seq_len) {
    return static_cast<int32_t>(std::clamp<int64_t>(anchor + k - 1, 0, seq_len - 1));
}

namespace {

// BlockLossArgs::argmax_out and tv_out, after the loss (`argmax` holds the rows' argmax).
void evaluation_rows(Backend& be, Workspace& ws, const BlockLossArgs& a, const Tensor& argmax) {
    if (!a.argmax_out.empty()) be.copy(a.argmax_out, argmax);
    if (a.tv_out.empty()) return;
    const int64_t R = a.hf.dim(0), D = a.hf.dim(1), V = a.lm_head.dim(0);
    DF_CHECK(!a.teacher_hidden.empty() && a.teacher_rows.numel() == R,
             "block_loss: the evaluation's TV rows need the target's final hidden states and one "
             "teacher row per block row ({} rows, got {})",
             R, a.teacher_rows.numel());
    const Tensor t = ws.take({R, D}, a.hf.dtype());
    be.embedding_fwd(a.teacher_hidden, a.teacher_rows, t);
    LmHeadDivergences tv;
    tv.kl = 0.0f;
    tv.tv = 1.0f;
    LmHeadKlOut out;
    out.loss_rows = a.tv_out;
    out.workspace = ws.take({be.lm_head_kl_workspace(R, D, V, a.chunk)}, DType::f32);
    be.lm_head_kl(a.hf, t, a.lm_head, a.weights, 0.0f, a.chunk, tv, out);
}

}  // namespace

void block_loss(Backend& be, Workspace& ws, const BlockLossArgs& a, const Tensor& dh,
                const Tensor& stats) {
    const int64_t R = a.hf.dim(0), D = a.hf.dim(1), V = a.lm_head.dim(0);
    const Tensor loss_rows = ws.take({R}, DType::f32);
    const Tensor argmax = ws.take({R}, DType::i32);
    // The op's row weights: with grad_weights the scale is in them already.
    const bool prescaled = !a.grad_weights.empty();
    const Tensor& op_weights = prescaled ? a.grad_weights : a.weights;
    const float op_scale = prescaled ? 1.0f : a.grad_scale;
    if (a.dpace_alpha > 0.0f) {
        DF_CHECK(a.loss.is_only(LossKind::ce),
                 "D-PACE weighting (train.loss_weighting=dpace) needs train.loss=ce, not {}",
                 a.loss.name());
        // The weights depend on every row's CE, and lm_head_ce takes its weights before its
        // forward: a forward-only call first gives the CEs (one more pass of the LM head over the
        // block rows), then the fused call runs the backward with the D-PACE weights.
        const Tensor ws_ce = ws.take({be.lm_head_ce_workspace(R, D, V, a.chunk)}, DType::f32);
        LmHeadCeOut fwd;
        fwd.loss_rows = loss_rows;
        fwd.argmax = argmax;
        fwd.workspace = ws_ce;
        be.lm_head_ce(a.hf, a.lm_head, a.labels, a.weights, 1.0f, a.chunk, fwd);
        const Tensor w = ws.take({R}, DType::f32);
        be.dpace_weights(loss_rows, a.weights, a.period, a.dpace_alpha, w);
        if (!dh.empty()) {
            const Tensor gw = ws.take({R}, DType::f32);
            be.dpace_weights(loss_rows, op_weights, a.period, a.dpace_alpha, gw);
            LmHeadCeOut bwd;
            bwd.dh = dh;
            bwd.workspace = ws_ce;
            be.lm_head_ce(a.hf, a.lm_head, a.labels, gw, op_scale, a.chunk, bwd);
        }
        be.loss_stats(loss_rows, argmax, a.labels, w, a.period, stats);
        evaluation_rows(be, ws, a, argmax);
        return;
    }
    const double ce_weight = a.loss.weight(LossKind::ce);
    const bool ce = ce_weight > 0.0, teacher = a.loss.needs_teacher();
    DF_CHECK(ce || teacher, "block_loss: train.loss has no terms");
    if (ce) {
        LmHeadCeOut out;
        out.loss_rows = loss_rows;
        out.argmax = argmax;
        out.dh = dh;
        out.workspace = ws.take({be.lm_head_ce_workspace(R, D, V, a.chunk)}, DType::f32);
        be.lm_head_ce(a.hf, a.lm_head, a.labels, op_weights,
                      op_scale * static_cast<float>(ce_weight), a.chunk, out);
        if (ce_weight != 1.0) be.scale_inplace(loss_rows, static_cast<float>(ce_weight));
    }
    if (teacher) {
        DF_CHECK(!a.teacher_hidden.empty() && a.teacher_rows.numel() == R,
                 "train.loss={} needs the target's final hidden states and one teacher row per "
                 "block row ({} rows, got {})",
                 a.loss.name(), R, a.teacher_rows.numel());
        // The teacher's rows side by side with the draft's: a gather of the target's hidden states
        // (an embedding lookup with positions for ids).
        const Tensor t = ws.take({R, D}, a.hf.dtype());
        be.embedding_fwd(a.teacher_hidden, a.teacher_rows, t);
        // After a ce term the divergences' loss and gradient go to their own rows and are added:
        // one weighting and one normaliser for the whole mix.
        LmHeadKlOut out;
        out.loss_rows = ce ? ws.take({R}, DType::f32) : loss_rows;
        out.argmax = ce ? Tensor() : argmax;
        out.dh = ce && !dh.empty() ? ws.take({R, D}, dh.dtype()) : dh;
        out.workspace = ws.take({be.lm_head_kl_workspace(R, D, V, a.chunk)}, DType::f32);
        be.lm_head_kl(a.hf, t, a.lm_head, op_weights, op_scale, a.chunk, a.loss.divergences(), out);
        if (ce) {
            be.add_inplace(loss_rows, out.loss_rows);
            if (!dh.empty()) be.add_inplace(dh, out.dh);
        }
    }
    // Accuracy stays against the data's tokens for every loss, so runs of different losses compare.
    be.loss_stats(loss_rows, argmax, a.labels, a.weights, a.period, stats);
    evaluation_rows(be, ws, a, argmax);
}

}  // namespace dflash

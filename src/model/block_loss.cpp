// Block-row losses of drafter training (see block_loss.h). Tested by
// tests/model/block_loss_test.cpp and tests/model/drafter_test.cpp.
#include "model/block_loss.h"

#include <algorithm>

#include "core/error.h"

namespace dflash {

LossKind parse_loss_kind(const std::string& name) {
    if (name == "ce") return LossKind::ce;
    if (name == "kl") return LossKind::kl;
    DF_FAIL(
        "train.loss='{}' is not a loss; expected ce (cross-entropy on the data's tokens) or kl "
        "(KL distillation from the target's distribution)",
        name);
}

const char* loss_kind_name(LossKind kind) {
    return kind == LossKind::kl ? "kl" : "ce";
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
        DF_CHECK(a.kind == LossKind::ce,
                 "D-PACE weighting (train.loss_weighting=dpace) needs train.loss=ce, not {}",
                 loss_kind_name(a.kind));
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
        return;
    }
    if (a.kind == LossKind::ce) {
        LmHeadCeOut out;
        out.loss_rows = loss_rows;
        out.argmax = argmax;
        out.dh = dh;
        out.workspace = ws.take({be.lm_head_ce_workspace(R, D, V, a.chunk)}, DType::f32);
        be.lm_head_ce(a.hf, a.lm_head, a.labels, op_weights, op_scale, a.chunk, out);
    } else {
        DF_CHECK(!a.teacher_hidden.empty() && a.teacher_rows.numel() == R,
                 "train.loss=kl needs the target's final hidden states and one teacher row per "
                 "block row ({} rows, got {})",
                 R, a.teacher_rows.numel());
        // The teacher's rows side by side with the draft's: a gather of the target's hidden states
        // (an embedding lookup with positions for ids).
        const Tensor t = ws.take({R, D}, a.hf.dtype());
        be.embedding_fwd(a.teacher_hidden, a.teacher_rows, t);
        LmHeadKlOut out;
        out.loss_rows = loss_rows;
        out.argmax = argmax;
        out.dh = dh;
        out.workspace = ws.take({be.lm_head_kl_workspace(R, D, V, a.chunk)}, DType::f32);
        be.lm_head_kl(a.hf, t, a.lm_head, op_weights, op_scale, a.chunk, out);
    }
    // Accuracy stays against the data's tokens for both kinds, so ce and kl runs compare.
    be.loss_stats(loss_rows, argmax, a.labels, a.weights, a.period, stats);
}

}  // namespace dflash

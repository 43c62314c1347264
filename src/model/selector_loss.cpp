// The DFlash2 selector's training loss (see selector_loss.h). Tested by
// tests/model/dflash2_selector_loss_test.cpp.
#include "model/selector_loss.h"

#include <algorithm>

namespace dflash {

void selector_loss(Backend& be, Workspace& ws, const ParamSet& params, const Dflash2Config& c,
                   const SelectorLossArgs& a, const Tensor& dh, const Tensor& stats) {
    const int64_t R = a.hf.dim(0), D = a.hf.dim(1), V = a.lm_head.dim(0);
    const int64_t K = c.selector_top_k, r = c.selector_rank;
    DF_CHECK(K <= V, "selector_top_k={} is larger than the vocabulary ({})", K, V);
    const DType act = be.compute_dtype();
    const Tensor wh = params.value("candidate_selector.hidden_projection.weight");
    const Tensor A = params.value("candidate_selector.predecessor_codebook");
    const Tensor Bc = params.value("candidate_selector.successor_codebook");

    // Candidates: the strict top-K of each row's raw logits (the unary post-processing keeps
    // their order, as at inference), then the target injected where it is missing.
    const Tensor values = ws.take({R, K}, DType::f32), ids = ws.take({R, K}, DType::i32);
    const Tensor label_pos = ws.take({R}, DType::i32), hit = ws.take({R}, DType::i32);
    const int64_t rows = std::clamp<int64_t>(R * std::min(a.chunk, V) / V, 1, R);
    const Tensor logits = ws.take({rows, V}, DType::f32);
    for (int64_t i0 = 0; i0 < R; i0 += rows) {
        const int64_t i1 = std::min(R, i0 + rows);
        const Tensor l = logits.rows(0, i1 - i0);
        be.gemm(a.hf.rows(i0, i1), false, a.lm_head, true, l);
        be.topk_rows(l, values.rows(i0, i1), ids.rows(i0, i1));
        be.selector_inject(l, a.labels.rows(i0, i1), values.rows(i0, i1), ids.rows(i0, i1),
                           label_pos.rows(i0, i1), hit.rows(i0, i1));
    }

    // Edge scores from the one teacher-forced predecessor per row: the inference formula.
    const Tensor z = ws.take({R, r}, act);
    be.gemm(a.hf, false, wh, true, z);
    const Tensor pred = a.pred.reshape({R, 1});
    const Tensor pair = ws.take({R, 1, K}, DType::f32);
    be.selector_scores_fwd(z, pred, ids, A, Bc, pair);

    const bool grads = !a.grad_weights.empty();
    SelectorCeArgs ce;
    ce.values = values;
    ce.pair = pair;
    ce.label_pos = label_pos;
    ce.weights = a.weights;
    ce.multiplier = static_cast<float>(c.output_multiplier);
    ce.softcap = static_cast<float>(c.final_logit_softcapping);
    ce.loss_rows = ws.take({R}, DType::f32);
    ce.pick = ws.take({R}, DType::i32);
    if (grads) {
        ce.grad_weights = a.grad_weights;
        ce.dvalues = ws.take({R, K}, DType::f32);
        ce.dpair = ws.take({R, 1, K}, DType::f32);
    }
    be.selector_ce(ce);
    be.selector_stats(ce.loss_rows, ce.pick, label_pos, hit, a.weights, a.block, stats);
    if (!grads) return;

    // Backward: the pair scores into z and the codebooks, z into the hidden projection and hf;
    // the candidates' unary values into hf through the frozen LM head rows.
    const Tensor dz = ws.take({R, r}, act);
    be.selector_scores_bwd(ce.dpair, z, pred, ids, A, Bc, dz,
                           params.grad("candidate_selector.predecessor_codebook"),
                           params.grad("candidate_selector.successor_codebook"));
    be.gemm(dz, true, a.hf, false, params.grad("candidate_selector.hidden_projection.weight"), 1.0f,
            1.0f);
    const Tensor dsel = ws.take({R, D}, DType::f32);
    be.selector_unary_bwd(ce.dvalues, ids, a.lm_head, dsel);
    be.gemm(dz, false, wh, false, dsel, 1.0f, 1.0f);
    be.add_inplace(dh, dsel);
}

}  // namespace dflash

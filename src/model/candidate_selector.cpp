// DFlash2 candidate selector (device part). Tested by tests/model/dflash2_drafter_test.cpp.
#include "model/candidate_selector.h"

#include <cmath>

namespace dflash {

float dflash2_unary(float logit, const Dflash2Config& c) {
    float u = logit * static_cast<float>(c.output_multiplier);
    if (c.final_logit_softcapping > 0) {
        const auto s = static_cast<float>(c.final_logit_softcapping);
        u = s * std::tanh(u / s);
    }
    return u;
}

CandidateSelector::CandidateSelector(const DrafterModel& model, Backend& be, int64_t max_slots)
    : model_(model), be_(be), K_(model.config().d2.selector_top_k) {
    DF_CHECK(model.config().dflash2(), "the candidate selector needs a DFlash2 drafter");
    const int64_t P = max_slots;
    values_ = DeviceTensor(be, {P, K_}, DType::f32);
    ids_ = DeviceTensor(be, {P, K_}, DType::i32);
    pred_ = DeviceTensor(be, {P, K_}, DType::i32);
    pair_ = DeviceTensor(be, {P, K_, K_}, DType::f32);
    values_h_ = HostTensor({P, K_});
    ids_h_ = HostTensor({P, K_}, DType::i32);
    pair_h_ = HostTensor({P, K_, K_});
}

void CandidateSelector::select(const Tensor& logits, const Tensor& z, int32_t anchor,
                               CandidateLattice& out) {
    const int64_t P = logits.dim(0), K = K_;
    DF_ASSERT(P >= 1 && P <= values_.dim(0) && z.dim(0) == P, "select: {} slots, z {}, room {}", P,
              z.describe(), values_.dim(0));
    const ParamSet& w = model_.params();
    const Tensor vals = values_.view().rows(0, P), ids = ids_.view().rows(0, P);
    const Tensor pred = pred_.view().rows(0, P), pair = pair_.view().rows(0, P);
    be_.topk_rows(logits, vals, ids);
    // Predecessors: the anchor for slot 0 (ids < 2^24 are exact in the fill's float), the
    // candidates of slot p-1 for slot p.
    be_.fill(pred.rows(0, 1), static_cast<float>(anchor));
    if (P > 1) be_.copy(pred.rows(1, P), ids.rows(0, P - 1));
    be_.selector_scores_fwd(z, pred, ids, w.value("candidate_selector.predecessor_codebook"),
                            w.value("candidate_selector.successor_codebook"), pair);
    be_.download(values_h_.view().rows(0, P), vals);
    be_.download(ids_h_.view().rows(0, P), ids);
    be_.download(pair_h_.view().rows(0, P), pair);
    out.P = P;
    out.K = K;
    out.ids.assign(ids_h_.i32(), ids_h_.i32() + P * K);
    out.unary.resize(P * K);
    for (int64_t i = 0; i < P * K; ++i)
        out.unary[i] = dflash2_unary(values_h_.f32()[i], model_.config().d2);
    out.pair.assign(pair_h_.f32(), pair_h_.f32() + P * K * K);
}

}  // namespace dflash

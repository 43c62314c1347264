// PreparedWeights (prepared_weights.h).
#include "model/prepared_weights.h"

#include "core/error.h"

namespace dflash {

DraftPrecision parse_draft_precision(const std::string& s) {
    if (s == "auto") return DraftPrecision::auto_;
    if (s == "f32") return DraftPrecision::f32;
    if (s == "bf16") return DraftPrecision::bf16;
    DF_FAIL("unknown draft precision '{}' (auto, f32 or bf16)", s);
}

const char* to_string(DraftPrecision p) {
    switch (p) {
        case DraftPrecision::auto_:
            return "auto";
        case DraftPrecision::f32:
            return "f32";
        case DraftPrecision::bf16:
            break;
    }
    return "bf16";
}

PreparedWeights::PreparedWeights(Backend& be, const std::vector<Tensor>& weights, WeightCopy copy) {
    for (const Tensor& w : weights) {
        if (w.empty() || copies_.count(w.data()) > 0) continue;  // absent, or listed twice (tied)
        std::unique_ptr<PreparedWeight> p =
            copy == WeightCopy::bf16 ? be.prepare_bf16_weight(w) : be.prepare_f32_weight(w);
        if (p) copies_.emplace(w.data(), std::move(p));
    }
}

const PreparedWeight* PreparedWeights::find(const Tensor& w) const {
    const auto it = copies_.find(w.data());
    return it == copies_.end() ? nullptr : it->second.get();
}

void linear(Backend& be, const PreparedWeights* prepared, const Tensor& x, const Tensor& w,
            const Tensor& y, float beta) {
    be.linear(x, w, prepared == nullptr ? nullptr : prepared->find(w), y, beta);
}

}  // namespace dflash

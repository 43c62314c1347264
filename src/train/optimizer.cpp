// AdamW and gradient clipping. Tested by tests/train/optimizer_test.cpp.
#include "train/optimizer.h"

#include <cmath>

#include "core/error.h"

namespace dflash::train {

AdamW::AdamW(const ParamSet& params, AdamWConfig cfg) : cfg_(cfg) {
    DF_CHECK(cfg.beta1 >= 0 && cfg.beta1 < 1 && cfg.beta2 >= 0 && cfg.beta2 < 1,
             "AdamW betas ({}, {}) must lie in [0, 1)", cfg.beta1, cfg.beta2);
    DF_CHECK(cfg.eps > 0, "AdamW eps={} must be positive (train.adam_eps)", cfg.eps);
    for (const Param& p : params.params()) {
        m_.emplace_back(p.value.shape());
        v_.emplace_back(p.value.shape());
    }
}

void AdamW::step(Backend& be, ParamSet& params, double lr) {
    DF_ASSERT(params.params().size() == m_.size(), "optimizer built for {} tensors, got {}",
              m_.size(), params.params().size());
    DF_ASSERT(params.has_grads(), "AdamW needs gradients");
    ++steps_;
    AdamWParams p;
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(cfg_.beta1);
    p.beta2 = static_cast<float>(cfg_.beta2);
    p.eps = static_cast<float>(cfg_.eps);
    p.weight_decay = static_cast<float>(cfg_.weight_decay);
    p.step = steps_;
    auto& ps = params.params();
    for (size_t i = 0; i < ps.size(); ++i) be.adamw_step(ps[i].value, ps[i].grad, m_[i], v_[i], p);
}

double global_grad_norm(Backend& be, const ParamSet& params) {
    double sum = 0;
    for (const Param& p : params.params()) sum += be.sum_squares(p.grad);
    return std::sqrt(sum);
}

double clip_grad_norm(Backend& be, ParamSet& params, double norm, double max_norm) {
    if (max_norm <= 0 || !(norm > max_norm)) return 1.0;
    // The small epsilon follows torch.nn.utils.clip_grad_norm_ (max / (norm + 1e-6)).
    const double factor = max_norm / (norm + 1e-6);
    for (Param& p : params.params()) be.scale_inplace(p.grad, static_cast<float>(factor));
    return factor;
}

}  // namespace dflash::train

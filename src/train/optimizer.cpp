// AdamW and the gradient norm. Tested by tests/train/optimizer_test.cpp.
#include "train/optimizer.h"

#include "core/error.h"

namespace dflash::train {

AdamW::AdamW(const ParamSet& params, AdamWConfig cfg) : cfg_(cfg) {
    DF_CHECK(cfg.beta1 >= 0 && cfg.beta1 < 1 && cfg.beta2 >= 0 && cfg.beta2 < 1,
             "AdamW betas ({}, {}) must lie in [0, 1)", cfg.beta1, cfg.beta2);
    DF_CHECK(cfg.eps > 0, "AdamW eps={} must be positive (train.adam_eps)", cfg.eps);
    DF_ASSERT(params.training(), "AdamW needs a training ParamSet");
    m_ = DeviceTensor(params.backend(), {params.numel()}, DType::f32);
    v_ = DeviceTensor(params.backend(), {params.numel()}, DType::f32);
}

void AdamW::step(Backend& be, ParamSet& params, double lr, const Tensor& grad_scale) {
    DF_ASSERT(params.numel() == m_.numel(), "optimizer built for {} elements, got {}", m_.numel(),
              params.numel());
    DF_ASSERT(params.training(), "AdamW needs gradients");
    ++steps_;
    AdamWParams p;
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(cfg_.beta1);
    p.beta2 = static_cast<float>(cfg_.beta2);
    p.eps = static_cast<float>(cfg_.eps);
    p.weight_decay = static_cast<float>(cfg_.weight_decay);
    p.step = steps_;
    const Tensor master = params.flat_master();
    const Tensor values = params.flat_values();
    // On an f32 backend the values are the masters: no second copy to write.
    const Tensor copy = values.data() == master.data() ? Tensor() : values;
    be.adamw_step(master, params.flat_grads(), m_, v_, p, grad_scale, copy);
}

void grad_norm_sq(Backend& be, const ParamSet& params, const Tensor& norm_sq) {
    be.sum_squares(params.flat_grads(), norm_sq);
}

}  // namespace dflash::train

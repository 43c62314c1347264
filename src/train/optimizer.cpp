// AdamW and the gradient norm. Tested by tests/train/optimizer_test.cpp.
#include "train/optimizer.h"

#include <algorithm>

#include "core/error.h"

namespace dflash::train {

FlatShard FlatShard::of(int64_t numel, int world, int rank) {
    DF_ASSERT(world >= 1 && rank >= 0 && rank < world);
    FlatShard s{numel, world, rank, 0};
    if (world > 1) s.chunk = numel / world / kAlign * kAlign;
    return s;
}

Tensor shard_chunk(const Tensor& flat, const FlatShard& shard) {
    return flat.rows(shard.begin(), shard.end());
}

Tensor shard_tail(const Tensor& flat, const FlatShard& shard) {
    return flat.rows(shard.tail(), shard.numel);
}

AdamW::AdamW(const ParamSet& params, AdamWConfig cfg)
    : AdamW(params, cfg, FlatShard::whole(params.numel())) {}

AdamW::AdamW(const ParamSet& params, AdamWConfig cfg, FlatShard shard) : cfg_(cfg), shard_(shard) {
    DF_CHECK(cfg.beta1 >= 0 && cfg.beta1 < 1 && cfg.beta2 >= 0 && cfg.beta2 < 1,
             "AdamW betas ({}, {}) must lie in [0, 1)", cfg.beta1, cfg.beta2);
    DF_CHECK(cfg.eps > 0, "AdamW eps={} must be positive (train.adam_eps)", cfg.eps);
    DF_ASSERT(params.training(), "AdamW needs a training ParamSet");
    DF_ASSERT(shard.numel == params.numel(), "a shard of {} elements for {} parameters",
              shard.numel, params.numel());
    m_ = DeviceTensor(params.backend(), {shard.owned()}, DType::f32);
    v_ = DeviceTensor(params.backend(), {shard.owned()}, DType::f32);
    scalars_ = DeviceTensor(params.backend(), {3}, DType::f32);
    scalars_host_ = params.backend().allocate_host(3 * sizeof(float));
}

void AdamW::step(Backend& be, ParamSet& params, double lr, const Tensor& grad_scale) {
    begin_step(be, lr);
    apply(be, params, grad_scale);
}

void AdamW::begin_step(Backend& be, double lr) {
    ++steps_;
    AdamWParams p;
    p.lr = static_cast<float>(lr);
    p.beta1 = static_cast<float>(cfg_.beta1);
    p.beta2 = static_cast<float>(cfg_.beta2);
    p.weight_decay = static_cast<float>(cfg_.weight_decay);
    p.step = steps_;
    const AdamWStepScalars s = adamw_step_scalars(p);
    // The previous step's scalars must have left the staging memory (free within a training
    // step, which ends with a download of its statistics).
    be.synchronize();
    auto* host = static_cast<float*>(scalars_host_.data());
    host[0] = s.decay;
    host[1] = s.step_size;
    host[2] = s.bc2_sqrt;
    be.upload(scalars_, Tensor(host, DType::f32, {3}));
}

void AdamW::apply(Backend& be, ParamSet& params, const Tensor& grad_scale) {
    DF_ASSERT(params.numel() == shard_.numel, "optimizer built for {} elements, got {}",
              shard_.numel, params.numel());
    DF_ASSERT(params.training(), "AdamW needs gradients");
    AdamWParams p;
    p.beta1 = static_cast<float>(cfg_.beta1);
    p.beta2 = static_cast<float>(cfg_.beta2);
    p.eps = static_cast<float>(cfg_.eps);
    p.weight_decay = static_cast<float>(cfg_.weight_decay);
    p.step = std::max<int64_t>(steps_, 1);
    p.scalars = scalars_.view();
    const Tensor master = params.flat_master();
    const Tensor values = params.flat_values();
    const Tensor grads = params.flat_grads();
    // On an f32 backend the values are the masters: no second copy to write.
    const bool copies = values.data() != master.data();
    if (!shard_.sharded()) {
        be.adamw_step(master, grads, m_, v_, p, grad_scale, copies ? values : Tensor());
        return;
    }
    // The chunk, then the tail; the caller gathers the other chunks and refreshes the values.
    const int64_t c = shard_.chunk, owned = shard_.owned();
    be.adamw_step(shard_chunk(master, shard_), shard_chunk(grads, shard_), m_.view().rows(0, c),
                  v_.view().rows(0, c), p, grad_scale, Tensor());
    if (owned > c)
        be.adamw_step(shard_tail(master, shard_), shard_tail(grads, shard_),
                      m_.view().rows(c, owned), v_.view().rows(c, owned), p, grad_scale, Tensor());
}

void grad_norm_sq(Backend& be, const ParamSet& params, const Tensor& norm_sq) {
    be.sum_squares(params.flat_grads(), norm_sq);
}

}  // namespace dflash::train

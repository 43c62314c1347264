// AdamW over a ParamSet's flat f32 master weights with flat f32 moments on the same device
// (docs/training.md "What a step does": fp32 master weights, decoupled weight decay), the global
// gradient norm and its clipping factor, all computed on the device (no host round trip inside a
// step). With train.shard_optimizer_state each of W workers keeps the moments of, and updates, one
// FlatShard of the flat parameters (Note [Optimizer-state sharding] in
// train/gradient_exchange.cpp). Tested by tests/train/optimizer_test.cpp and, sharded,
// tests/train/optimizer_shard_test.cpp.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/tensor.h"
#include "model/params.h"

namespace dflash::train {

struct AdamWConfig {
    double beta1 = 0.9;
    double beta2 = 0.95;
    double eps = 1e-8;
    double weight_decay = 0.0;
};

// The part of a flat parameter buffer of `numel` elements that worker `rank` of `world` updates
// when the optimizer state is sharded: its chunk [rank * chunk, (rank + 1) * chunk) of the first
// world * chunk elements (chunk a multiple of kAlign, so every chunk starts 256-byte aligned and
// the collectives see equal counts), plus the tail [world * chunk, numel) of fewer than
// world * (kAlign + 1) elements, which every worker updates alike. Unsharded (world 1), the
// chunk is empty and the tail is everything.
struct FlatShard {
    static constexpr int64_t kAlign = 64;
    int64_t numel = 0;
    int world = 1;
    int rank = 0;
    int64_t chunk = 0;

    static FlatShard whole(int64_t numel) { return {numel, 1, 0, 0}; }
    static FlatShard of(int64_t numel, int world, int rank);

    bool sharded() const { return chunk > 0; }
    int64_t begin() const { return rank * chunk; }
    int64_t end() const { return begin() + chunk; }
    int64_t tail() const { return world * chunk; }            // first element of the common tail
    int64_t owned() const { return chunk + numel - tail(); }  // moment elements per worker
};

class AdamW {
  public:
    // Zero moments for `shard` of the flat parameters of `params` (which must be training); by
    // default all of them.
    AdamW(const ParamSet& params, AdamWConfig cfg);
    AdamW(const ParamSet& params, AdamWConfig cfg, FlatShard shard);

    // One update of every parameter from its gradient times grad_scale[0] (f32 [1] on the device:
    // the clipping factor; empty = 1) with learning rate `lr`; the step count (bias correction)
    // advances by one. The compute copy of the weights is refreshed in the same pass.
    void step(Backend& be, ParamSet& params, double lr, const Tensor& grad_scale);

    // The same in two halves, for a recorded step (Backend::run_step): begin_step advances the
    // step count and sends this step's scalars (from lr) to the device, outside the recorded
    // part; apply queues the update, which reads them there.
    void begin_step(Backend& be, double lr);
    void apply(Backend& be, ParamSet& params, const Tensor& grad_scale);

    int64_t steps_done() const { return steps_; }
    void set_steps_done(int64_t n) { steps_ = n; }
    const AdamWConfig& config() const { return cfg_; }
    const FlatShard& shard() const { return shard_; }
    // The moments this worker keeps, f32 [shard().owned()] on the params' device: the chunk's
    // [chunk] then the tail's [numel - tail]; unsharded, [numel] in ParamSet order
    // (Param::offset).
    Tensor m() const { return m_.view(); }
    Tensor v() const { return v_.view(); }

  private:
    AdamWConfig cfg_;
    FlatShard shard_;
    int64_t steps_ = 0;
    DeviceTensor m_;
    DeviceTensor v_;
    DeviceTensor scalars_;  // f32 [3]: adamw_step_scalars of the current step
    Buffer scalars_host_;   // their staging memory (pinned on CUDA)
};

// norm_sq (f32 [1] on the device) = sum of squares of every gradient; the global norm is its root.
void grad_norm_sq(Backend& be, const ParamSet& params, const Tensor& norm_sq);

// The flat ranges of `shard` as views of a flat [numel] tensor: the chunk and the tail.
Tensor shard_chunk(const Tensor& flat, const FlatShard& shard);
Tensor shard_tail(const Tensor& flat, const FlatShard& shard);

}  // namespace dflash::train

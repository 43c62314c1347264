// AdamW over a ParamSet's flat f32 master weights with flat f32 moments on the same device
// (dflash-spec §3.5: fp32 master weights, decoupled weight decay), the global gradient norm and its
// clipping factor, all computed on the device (no host round trip inside a step).
// Tested by tests/train/optimizer_test.cpp.
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

class AdamW {
  public:
    // Zero moments shaped like the flat parameters of `params` (which must be training).
    AdamW(const ParamSet& params, AdamWConfig cfg);

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
    // Flat moments [numel] in ParamSet order (Param::offset), f32 on the params' device.
    Tensor m() const { return m_.view(); }
    Tensor v() const { return v_.view(); }

  private:
    AdamWConfig cfg_;
    int64_t steps_ = 0;
    DeviceTensor m_;
    DeviceTensor v_;
    DeviceTensor scalars_;  // f32 [3]: adamw_step_scalars of the current step
    Buffer scalars_host_;   // their staging memory (pinned on CUDA)
};

// norm_sq (f32 [1] on the device) = sum of squares of every gradient; the global norm is its root.
void grad_norm_sq(Backend& be, const ParamSet& params, const Tensor& norm_sq);

}  // namespace dflash::train

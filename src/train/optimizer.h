// AdamW over a ParamSet with fp32 moments (dflash-spec §3.5: fp32 master weights, decoupled weight
// decay) and global gradient-norm clipping. Tested by tests/train/optimizer_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

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
    // Zero moments shaped like every parameter of `params` (which must have gradients).
    AdamW(const ParamSet& params, AdamWConfig cfg);

    // One update of every parameter from its gradient with learning rate `lr`; the step count
    // (bias correction) advances by one.
    void step(Backend& be, ParamSet& params, double lr);

    int64_t steps_done() const { return steps_; }
    void set_steps_done(int64_t n) { steps_ = n; }
    const AdamWConfig& config() const { return cfg_; }
    // Moments of parameter i (ParamSet order): [same shape as the parameter].
    const HostTensor& m(size_t i) const { return m_[i]; }
    const HostTensor& v(size_t i) const { return v_[i]; }
    HostTensor& m(size_t i) { return m_[i]; }
    HostTensor& v(size_t i) { return v_[i]; }
    size_t size() const { return m_.size(); }

  private:
    AdamWConfig cfg_;
    int64_t steps_ = 0;
    std::vector<HostTensor> m_;  // fp32, one per parameter
    std::vector<HostTensor> v_;  // fp32, one per parameter
};

// sqrt(sum of squares of every gradient), accumulated in double.
double global_grad_norm(Backend& be, const ParamSet& params);

// Scales every gradient by max_norm / norm when norm > max_norm (max_norm 0 = off). `norm` is
// the global norm before clipping (global_grad_norm). Returns the factor applied (1 if none).
double clip_grad_norm(Backend& be, ParamSet& params, double norm, double max_norm);

}  // namespace dflash::train

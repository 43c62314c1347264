// A Backend that hands every call to another backend, for tests that watch or steer what a model
// asks of its backend without a hook in the library: a subclass overrides the op it studies (or
// seen(), called with each op's name before it is forwarded). Memory, transfers and the
// workspace queries go to the real backend; run_step is not forwarded (Backend's default runs the
// step eagerly), so an override may download, upload or synchronize in the middle of a step; nor
// are linear, prepare_bf16_weight and prepare_f32_weight (Backend's defaults: a gemm, no prepared
// copies, which is what a target's forward asks for).
// Used by tests/model/target_early_stop_test.cpp (op counts) and
// tests/cuda/moe_target_cuda_test.cpp (the router's logits and picks).
#pragma once

#include <string>

#include "backend/backend.h"

namespace dflash::test {

class ForwardingBackend : public Backend {
  public:
    explicit ForwardingBackend(Backend& real) : real_(real) {}
    std::string name() const override { return "forwarding(" + real_.name() + ")"; }
    DeviceRef device() const override { return real_.device(); }
    DType compute_dtype() const override { return real_.compute_dtype(); }
    Buffer allocate(size_t bytes) override { return real_.allocate(bytes); }
    Buffer allocate_host(size_t bytes) override { return real_.allocate_host(bytes); }
    void upload(const Tensor& dst, const Tensor& src) override { real_.upload(dst, src); }
    void download(const Tensor& dst, const Tensor& src) override { real_.download(dst, src); }
    void synchronize() override { real_.synchronize(); }
#define DFLASH_OP(name, params, args) \
    void name params override {       \
        seen(#name);                  \
        real_.name args;              \
    }
#include "backend/op_list.h"
    int64_t lm_head_ce_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                 int64_t chunk) const override {
        return real_.lm_head_ce_workspace(rows, dim, vocab, chunk);
    }
    int64_t lm_head_kl_workspace(int64_t rows, int64_t dim, int64_t vocab,
                                 int64_t chunk) const override {
        return real_.lm_head_kl_workspace(rows, dim, vocab, chunk);
    }

  protected:
    // Called with an op's name (backend/op_list.h) before the op is forwarded.
    virtual void seen(const char* op) {
        (void)op;
    }
    Backend& real() {
        return real_;
    }

  private:
    Backend& real_;
};

}  // namespace dflash::test

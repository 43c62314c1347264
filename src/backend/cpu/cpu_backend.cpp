// CpuBackend: the Backend interface over the cpu:: reference ops. Each call forwards with the
// backend's thread count; there is no other state.
// Tested by tests/model/*_test.cpp and tests/infer/*_test.cpp, which run the models through it.
#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"

namespace dflash {
namespace {

class CpuBackend final : public Backend {
  public:
    explicit CpuBackend(int threads) : ex_{threads < 1 ? 1 : threads} {}
    std::string name() const override { return "cpu"; }
    DeviceRef device() const override { return {}; }

    void gemm(const Tensor& a, bool ta, const Tensor& b, bool tb, const Tensor& c, float alpha,
              float beta) override {
        cpu::gemm(ex_, a, ta, b, tb, c, alpha, beta);
    }
    void embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& out) override {
        cpu::embedding_fwd(ex_, table, ids, out);
    }
    void embedding_bwd(const Tensor& ids, const Tensor& dout, const Tensor& dtable) override {
        cpu::embedding_bwd(ex_, ids, dout, dtable);
    }
    void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                     const Tensor& rstd) override {
        cpu::rmsnorm_fwd(ex_, x, w, eps, y, rstd);
    }
    void rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                     const Tensor& dx, const Tensor& dw) override {
        cpu::rmsnorm_bwd(ex_, dy, x, w, rstd, dx, dw);
    }
    void rope_fwd(const Tensor& x, const Tensor& pos, const std::vector<float>& f) override {
        cpu::rope_fwd(ex_, x, pos, f);
    }
    void rope_bwd(const Tensor& dx, const Tensor& pos, const std::vector<float>& f) override {
        cpu::rope_bwd(ex_, dx, pos, f);
    }
    void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v, const AttnMask& mask,
                       const Tensor& out, const Tensor& lse) override {
        cpu::attention_fwd(ex_, q, k, v, mask, out, lse);
    }
    void attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                       const Tensor& out, const Tensor& lse, const AttnMask& mask, const Tensor& dq,
                       const Tensor& dk, const Tensor& dv) override {
        cpu::attention_bwd(ex_, dout, q, k, v, out, lse, mask, dq, dk, dv);
    }
    void swiglu_fwd(const Tensor& gate, const Tensor& up, const Tensor& out) override {
        cpu::swiglu_fwd(ex_, gate, up, out);
    }
    void swiglu_bwd(const Tensor& dout, const Tensor& gate, const Tensor& up, const Tensor& dgate,
                    const Tensor& dup) override {
        cpu::swiglu_bwd(ex_, dout, gate, up, dgate, dup);
    }
    void add_inplace(const Tensor& y, const Tensor& x, float alpha) override {
        cpu::add_inplace(ex_, y, x, alpha);
    }
    void scale_inplace(const Tensor& y, float alpha) override { cpu::scale_inplace(ex_, y, alpha); }
    void lm_head_ce(const Tensor& h, const Tensor& w, const Tensor& labels, const Tensor& weights,
                    float grad_scale, int64_t chunk, const LmHeadCeOut& out) override {
        cpu::lm_head_ce(ex_, h, w, labels, weights, grad_scale, chunk, out);
    }
    void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const AdamWParams& p) override {
        cpu::adamw_step(ex_, param, grad, m, v, p);
    }
    double sum_squares(const Tensor& t) override { return cpu::sum_squares(ex_, t); }

  private:
    cpu::Exec ex_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
    return std::make_unique<CpuBackend>(threads);
}

}  // namespace dflash

// Backend: the op set every model is written against (design §5). CpuBackend (backend/cpu) is the
// fp32 reference; a CUDA backend implements the same interface. All tensors are row-major and
// contiguous; shapes are in the comments and checked by each op.
// Tested through CpuBackend by tests/ops/*_test.cpp and every model test (tests/model/).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/tensor.h"

namespace dflash {

class Backend {
  public:
    virtual ~Backend() = default;
    virtual std::string name() const = 0;
    virtual DeviceRef device() const = 0;

    // C = alpha * op(A) · op(B) + beta * C, op(X) = X or Xᵀ. A linear layer with an HF weight
    // W [out, in] is gemm(x, false, W, true, y): y[M, out] = x[M, in] · Wᵀ.
    virtual void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c,
                      float alpha = 1.0f, float beta = 0.0f) = 0;

    // out[S, D] = table[ids[s]]; ids i32 [S], table [V, D].
    virtual void embedding_fwd(const Tensor& table, const Tensor& ids, const Tensor& out) = 0;
    // dtable[ids[s]] += dout[s]
    virtual void embedding_bwd(const Tensor& ids, const Tensor& dout, const Tensor& dtable) = 0;

    // RMSNorm over the last dim C = w.numel(); x, y viewed as [R, C]; rstd [R] (may be empty).
    virtual void rmsnorm_fwd(const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                             const Tensor& rstd) = 0;
    // dx overwritten, dw accumulated (+=). rstd from the forward.
    virtual void rmsnorm_bwd(const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor& rstd,
                             const Tensor& dx, const Tensor& dw) = 0;

    // In place on x [S, Hx, Dh] with positions i32 [S]; inv_freq [Dh/2] from rope_inv_freq.
    virtual void rope_fwd(const Tensor& x, const Tensor& positions,
                          const std::vector<float>& inv_freq) = 0;
    // In place on dx: the transpose of the rotation (rotation by the negative angle).
    virtual void rope_bwd(const Tensor& dx, const Tensor& positions,
                          const std::vector<float>& inv_freq) = 0;

    // q [Sq, H, Dh], k/v [Sk, Hkv, Dh], out [Sq, H, Dh], lse f32 [H, Sq] (may be empty).
    // GQA: head h reads kv head h / (H / Hkv). Scale Dh^-1/2. A row that sees no key gets out 0 and
    // lse -inf.
    virtual void attention_fwd(const Tensor& q, const Tensor& k, const Tensor& v,
                               const AttnMask& mask, const Tensor& out, const Tensor& lse) = 0;
    // dq, dk, dv overwritten.
    virtual void attention_bwd(const Tensor& dout, const Tensor& q, const Tensor& k,
                               const Tensor& v, const Tensor& out, const Tensor& lse,
                               const AttnMask& mask, const Tensor& dq, const Tensor& dk,
                               const Tensor& dv) = 0;

    // out = silu(gate) * up over [R, I]. dgate, dup overwritten.
    virtual void swiglu_fwd(const Tensor& gate, const Tensor& up, const Tensor& out) = 0;
    virtual void swiglu_bwd(const Tensor& dout, const Tensor& gate, const Tensor& up,
                            const Tensor& dgate, const Tensor& dup) = 0;

    // y += alpha * x (residual add, gradient accumulation); y *= alpha.
    virtual void add_inplace(const Tensor& y, const Tensor& x, float alpha = 1.0f) = 0;
    virtual void scale_inplace(const Tensor& y, float alpha) = 0;

    // Final projection + cross-entropy over vocabulary chunks of `chunk` rows of w (never the
    // whole [R, V] logits). h [R, D], w [V, D], labels i32 [R], weights f32 [R]. Rows with weight 0
    // are ignored (their label may be -1). See LmHeadCeOut.
    virtual void lm_head_ce(const Tensor& h, const Tensor& w, const Tensor& labels,
                            const Tensor& weights, float grad_scale, int64_t chunk,
                            const LmHeadCeOut& out) = 0;

    // Decoupled-weight-decay Adam on fp32 param/grad/moments of one tensor.
    virtual void adamw_step(const Tensor& param, const Tensor& grad, const Tensor& m,
                            const Tensor& v, const AdamWParams& p) = 0;
    // Sum of squares in double (global grad norm = sqrt of the sum over tensors).
    virtual double sum_squares(const Tensor& t) = 0;
};

// Inverse frequencies [Dh/2] of NeoX RoPE with the Qwen3/Llama rope_scaling variants, in float32
// like the HF reference.
std::vector<float> rope_inv_freq(const RopeConfig& cfg, int64_t head_dim);

std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace dflash

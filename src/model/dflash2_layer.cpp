// DFlash2 drafter layer: decoding (KV cache, draft attention) and training (forward, backward).
// Tested by tests/model/dflash2_drafter_test.cpp and tests/cuda/dflash2_model_cuda_test.cpp.
#include "model/dflash2_layer.h"

#include <algorithm>

namespace dflash {

Dflash2LayerWeights dflash2_layer_weights(const ParamSet& p, const std::string& prefix) {
    auto conv = [&](const char* name) {
        return ConvWeights{p.value(prefix + name + ".base_kernel"),
                           p.value(prefix + name + ".kernel_projection.weight")};
    };
    return Dflash2LayerWeights{conv("attention_conv"), conv("mlp_conv")};
}

void draft_attention(const LayerContext& lc, const Tensor& q, const LayerKvCache& cache, int64_t n,
                     const Tensor& kv_len, const DraftAttention& att, const Tensor& out) {
    const LayerDims& d = lc.dims;
    const int64_t Sq = q.dim(0);
    const Tensor o = out.reshape({Sq, d.H, d.Dh});
    if (att.window <= 0 || n <= att.window) {
        const AttnMaskKind kind = att.causal ? AttnMaskKind::causal : AttnMaskKind::full;
        lc.be.attention_fwd(q, cache.k.view(), cache.v.view(), AttnMask::over_cache(kind, kv_len),
                            o, Tensor());
        return;
    }
    for (int64_t i = 0; i < Sq; ++i) {
        const int64_t qpos = n - Sq + i;
        const int64_t lo = std::max<int64_t>(0, qpos - att.window + 1);
        const int64_t hi = att.causal ? qpos + 1 : std::min(n, qpos + att.window);
        lc.be.attention_fwd(q.rows(i, i + 1), cache.k.view().rows(lo, hi),
                            cache.v.view().rows(lo, hi), AttnMask::full(), o.rows(i, i + 1),
                            Tensor());
    }
}

namespace {

// One sublayer's input side over rows in blocks of bs: hn = norm(x) (rstd kept for training),
// delta = kernel_projection(hn) (both convolution kernels of the sublayer come from it),
// hc = conv_before(hn).
struct SublayerIn {
    Tensor hn, rstd, delta, hc;
};

SublayerIn prepare(const LayerContext& lc, const Tensor& x, const Tensor& norm_w,
                   const ConvWeights& cw, int64_t bs) {
    Backend& be = lc.be;
    const int64_t R = x.dim(0), D = lc.dims.D;
    const DType act = be.compute_dtype();
    SublayerIn in{lc.ws.take({R, D}, act), lc.ws.take({R}, DType::f32),
                  lc.ws.take({R, cw.proj.dim(0)}, act), lc.ws.take({R, D}, act)};
    be.rmsnorm_fwd(x, norm_w, lc.dims.eps, in.hn, in.rstd);
    linear(be, lc.prepared, in.hn, cw.proj, in.delta);
    be.dyn_conv_fwd(in.hn, cw.base, in.delta, 0, bs, in.hc);
    return in;
}

// out = residual + conv_after(y), with the kernel of the sublayer's input.
void finish(Backend& be, const ConvWeights& cw, const Tensor& delta, int64_t bs, const Tensor& y,
            const Tensor& residual, const Tensor& out) {
    be.dyn_conv_fwd(y, cw.base, delta, 1, bs, out);
    be.add_inplace(out, residual, 1.0f);
}

// Backward of one sublayer's two convolutions around its core: from the gradient at the sublayer
// output (dout, the residual's share excluded) to the gradient at its normed input dhn. `core`
// maps the gradient at the core's output to the gradient at its input.
template <class Core>
void sublayer_backward(const LayerContext& lc, const ConvWeights& w, const ConvWeights& g,
                       const Tensor& hn, const Tensor& delta, const Tensor& y, int64_t bs,
                       const Tensor& dout, const Tensor& dhn, Core&& core) {
    Backend& be = lc.be;
    const int64_t R = hn.dim(0), D = lc.dims.D;
    const DType act = be.compute_dtype();
    const Tensor dy = lc.ws.take({R, D}, act), dhc = lc.ws.take({R, D}, act);
    const Tensor ddelta = lc.ws.take(delta.shape(), act);
    be.dyn_conv_bwd(dout, y, w.base, delta, 1, bs, dy, g.base, ddelta);
    core(dy, dhc);
    be.dyn_conv_bwd(dhc, hn, w.base, delta, 0, bs, dhn, g.base, ddelta);
    // delta = hn · projᵀ: both halves of ddelta are written by now.
    be.gemm(ddelta, false, w.proj, false, dhn, 1.0f, 1.0f);
    be.gemm(ddelta, true, hn, false, g.proj, 1.0f, 1.0f);
}

}  // namespace

Dflash2LayerWeights dflash2_layer_grads(const ParamSet& p, const std::string& prefix) {
    auto conv = [&](const char* name) {
        return ConvWeights{p.grad(prefix + name + ".base_kernel"),
                           p.grad(prefix + name + ".kernel_projection.weight")};
    };
    return Dflash2LayerWeights{conv("attention_conv"), conv("mlp_conv")};
}

void dflash2_layer_forward_cached(const LayerContext& lc, const LayerWeights& w,
                                  const Dflash2LayerWeights& cw, const Tensor& x, const Tensor& pos,
                                  LayerKvCache& cache, int64_t cache_len, const Tensor& row0,
                                  const Tensor& kv_len, const DraftAttention& att,
                                  const Tensor& out) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    DF_ASSERT(w.bq.empty() && w.bo.empty() && !w.q_norm.empty(),
              "drafter layers are Qwen3-style: q/k norms, no biases");
    const int64_t Sq = x.dim(0);
    const Workspace::Mark mark = lc.ws.mark();
    auto buf = [&](Shape s) { return lc.ws.take(s, be.compute_dtype()); };

    // Attention: q from the convolved rows; their own K/V (k_proj/k_norm/RoPE, v_proj) join the
    // cache after the context's.
    const SublayerIn a = prepare(lc, x, w.input_ln, cw.attn, Sq);
    Tensor q_lin = buf({Sq, d.H * d.Dh}), q = buf({Sq, d.H, d.Dh});
    linear(be, lc.prepared, a.hc, w.wq, q_lin);
    be.rmsnorm_fwd(q_lin.reshape({Sq * d.H, d.Dh}), w.q_norm, d.eps, q.reshape({Sq * d.H, d.Dh}),
                   lc.ws.take({Sq * d.H}, DType::f32));
    be.rope_fwd(q, pos, lc.inv_freq);
    layer_append_context(lc, w, a.hc, pos, cache, row0);
    Tensor attn = buf({Sq, d.H * d.Dh}), o = buf({Sq, d.D}), x1 = buf({Sq, d.D});
    draft_attention(lc, q, cache, cache_len + Sq, kv_len, att, attn);
    linear(be, lc.prepared, attn, w.wo, o);
    finish(be, cw.attn, a.delta, Sq, o, x, x1);

    // MLP.
    const SublayerIn m = prepare(lc, x1, w.post_ln, cw.mlp, Sq);
    Tensor gate = buf({Sq, d.I}), up = buf({Sq, d.I}), act = buf({Sq, d.I}), y = buf({Sq, d.D});
    linear(be, lc.prepared, m.hc, w.w_gate, gate);
    linear(be, lc.prepared, m.hc, w.w_up, up);
    be.swiglu_fwd(gate, up, act);
    linear(be, lc.prepared, act, w.w_down, y);
    finish(be, cw.mlp, m.delta, Sq, y, x1, out);
    lc.ws.release(mark);
}

void dflash2_layer_forward_train(const LayerContext& lc, const LayerWeights& w,
                                 const Dflash2LayerWeights& cw, const Tensor& x, const Tensor& ctx,
                                 const Tensor& q_pos, const Tensor& kv_pos, const AttnMask& mask,
                                 int64_t block_size, Dflash2Acts& a, const Tensor& out) {
    Backend& be = lc.be;
    const int64_t R = x.dim(0), D = lc.dims.D;
    a.core.x = x;
    const SublayerIn in = prepare(lc, x, w.input_ln, cw.attn, block_size);
    a.core.rstd1 = in.rstd;
    a.h = in.hn;
    a.delta = in.delta;
    a.o = lc.ws.take({R, D}, be.compute_dtype());
    attention_core_forward(lc, w, in.hc, ctx, q_pos, kv_pos, mask, a.core, a.o, false);
    a.core.x1 = lc.ws.take({R, D}, be.compute_dtype());
    finish(be, cw.attn, a.delta, block_size, a.o, x, a.core.x1);
    const SublayerIn in2 = prepare(lc, a.core.x1, w.post_ln, cw.mlp, block_size);
    a.core.rstd2 = in2.rstd;
    a.h2 = in2.hn;
    a.delta2 = in2.delta;
    a.m = lc.ws.take({R, D}, be.compute_dtype());
    mlp_core_forward(lc, w, in2.hc, a.core, a.m, false);
    finish(be, cw.mlp, a.delta2, block_size, a.m, a.core.x1, out);
}

void dflash2_layer_backward(const LayerContext& lc, const LayerWeights& w, const LayerWeights& g,
                            const Dflash2LayerWeights& cw, const Dflash2LayerWeights& cg,
                            const Dflash2Acts& a, const Tensor& q_pos, const Tensor& kv_pos,
                            const AttnMask& mask, int64_t block_size, const Tensor& dout,
                            const Tensor& dx, const Tensor& dctx) {
    Backend& be = lc.be;
    const int64_t R = a.core.Sq, D = lc.dims.D;
    const Workspace::Mark mark = lc.ws.mark();
    const Tensor dh2 = lc.ws.take({R, D}, be.compute_dtype());
    sublayer_backward(lc, cw.mlp, cg.mlp, a.h2, a.delta2, a.m, block_size, dout, dh2,
                      [&](const Tensor& dy, const Tensor& dh2c) {
                          mlp_core_backward(lc, w, g, a.core, dy, dh2c);
                      });
    const Tensor dx1 = lc.ws.take({R, D}, be.compute_dtype());
    be.rmsnorm_bwd(dh2, a.core.x1, w.post_ln, a.core.rstd2, dx1, g.post_ln);
    be.add_inplace(dx1, dout, 1.0f);
    const Tensor dh = lc.ws.take({R, D}, be.compute_dtype());
    sublayer_backward(lc, cw.attn, cg.attn, a.h, a.delta, a.o, block_size, dx1, dh,
                      [&](const Tensor& d_o, const Tensor& dhc) {
                          attention_core_backward(lc, w, g, a.core, q_pos, kv_pos, mask, d_o, dhc,
                                                  dctx);
                      });
    be.rmsnorm_bwd(dh, a.core.x, w.input_ln, a.core.rstd1, dx, g.input_ln);
    be.add_inplace(dx, dx1, 1.0f);
    lc.ws.release(mark);
}

}  // namespace dflash

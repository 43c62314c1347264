// DFlash2 drafter layer (inference). Tested by tests/model/dflash2_drafter_test.cpp.
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

// One sublayer's input side: hn = norm(x) (the pre-norm), delta = kernel_projection(hn) (both
// convolution kernels of the sublayer come from it), hc = conv_before(hn).
struct SublayerIn {
    Tensor delta, hc;
};

SublayerIn prepare(const LayerContext& lc, const Tensor& x, const Tensor& norm_w,
                   const ConvWeights& cw) {
    Backend& be = lc.be;
    const int64_t Sq = x.dim(0), D = lc.dims.D;
    const DType act = be.compute_dtype();
    const Tensor hn = lc.ws.take({Sq, D}, act);
    be.rmsnorm_fwd(x, norm_w, lc.dims.eps, hn, lc.ws.take({Sq}, DType::f32));
    SublayerIn in{lc.ws.take({Sq, cw.proj.dim(0)}, act), lc.ws.take({Sq, D}, act)};
    be.gemm(hn, false, cw.proj, true, in.delta);
    be.dyn_conv_fwd(hn, cw.base, in.delta, 0, Sq, in.hc);
    return in;
}

// out = residual + conv_after(y), with the kernel of the sublayer's input.
void finish(Backend& be, const ConvWeights& cw, const SublayerIn& in, const Tensor& y,
            const Tensor& residual, const Tensor& out) {
    be.dyn_conv_fwd(y, cw.base, in.delta, 1, y.dim(0), out);
    be.add_inplace(out, residual, 1.0f);
}

}  // namespace

void dflash2_layer_forward_cached(const LayerContext& lc, const LayerWeights& w,
                                  const Dflash2LayerWeights& cw, const Tensor& x, const Tensor& pos,
                                  LayerKvCache& cache, int64_t cache_len, const Tensor& kv_len,
                                  const DraftAttention& att, const Tensor& out) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    DF_ASSERT(w.bq.empty() && w.bo.empty() && !w.q_norm.empty(),
              "drafter layers are Qwen3-style: q/k norms, no biases");
    const int64_t Sq = x.dim(0);
    const Workspace::Mark mark = lc.ws.mark();
    auto buf = [&](Shape s) { return lc.ws.take(s, be.compute_dtype()); };

    // Attention: q from the convolved rows; their own K/V (k_proj/k_norm/RoPE, v_proj) join the
    // cache after the context's.
    const SublayerIn a = prepare(lc, x, w.input_ln, cw.attn);
    Tensor q_lin = buf({Sq, d.H * d.Dh}), q = buf({Sq, d.H, d.Dh});
    be.gemm(a.hc, false, w.wq, true, q_lin);
    be.rmsnorm_fwd(q_lin.reshape({Sq * d.H, d.Dh}), w.q_norm, d.eps, q.reshape({Sq * d.H, d.Dh}),
                   lc.ws.take({Sq * d.H}, DType::f32));
    be.rope_fwd(q, pos, lc.inv_freq);
    layer_append_context(lc, w, a.hc, pos, cache, cache_len);
    Tensor attn = buf({Sq, d.H * d.Dh}), o = buf({Sq, d.D}), x1 = buf({Sq, d.D});
    draft_attention(lc, q, cache, cache_len + Sq, kv_len, att, attn);
    be.gemm(attn, false, w.wo, true, o);
    finish(be, cw.attn, a, o, x, x1);

    // MLP.
    const SublayerIn m = prepare(lc, x1, w.post_ln, cw.mlp);
    Tensor gate = buf({Sq, d.I}), up = buf({Sq, d.I}), act = buf({Sq, d.I}), y = buf({Sq, d.D});
    be.gemm(m.hc, false, w.w_gate, true, gate);
    be.gemm(m.hc, false, w.w_up, true, up);
    be.swiglu_fwd(gate, up, act);
    be.gemm(act, false, w.w_down, true, y);
    finish(be, cw.mlp, m, y, x1, out);
    lc.ws.release(mark);
}

}  // namespace dflash

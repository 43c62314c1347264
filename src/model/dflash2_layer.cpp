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

// y = conv_{half}(x) with the kernel projection delta of this sublayer; one block of Sq rows.
void conv(Backend& be, const ConvWeights& cw, const Tensor& delta, int64_t half, const Tensor& x,
          const Tensor& y) {
    be.dyn_conv_fwd(x, cw.base, delta, half, x.dim(0), y);
}

}  // namespace

void dflash2_layer_forward_cached(const LayerContext& lc, const LayerWeights& w,
                                  const Dflash2LayerWeights& cw, const Tensor& x, const Tensor& pos,
                                  LayerKvCache& cache, int64_t cache_len, const Tensor& kv_len,
                                  const DraftAttention& att, const Tensor& out) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    DF_ASSERT(w.bq.empty() && w.bo.empty(), "drafter layers have no biases");
    const int64_t Sq = x.dim(0);
    const Workspace::Mark mark = lc.ws.mark();
    const DType act = be.compute_dtype();
    auto buf = [&](Shape s) { return lc.ws.take(s, act); };
    auto f32 = [&](Shape s) { return lc.ws.take(s, DType::f32); };

    // Attention sublayer.
    Tensor h = buf({Sq, d.D});
    be.rmsnorm_fwd(x, w.input_ln, d.eps, h, f32({Sq}));
    Tensor delta = buf({Sq, cw.attn.proj.dim(0)});
    be.gemm(h, false, cw.attn.proj, true, delta);
    Tensor hc = buf({Sq, d.D});
    conv(be, cw.attn, delta, 0, h, hc);
    Tensor q_lin = buf({Sq, d.H * d.Dh});
    Tensor q = buf({Sq, d.H, d.Dh});
    be.gemm(hc, false, w.wq, true, q_lin);
    be.rmsnorm_fwd(q_lin.reshape({Sq * d.H, d.Dh}), w.q_norm, d.eps, q.reshape({Sq * d.H, d.Dh}),
                   f32({Sq * d.H}));
    be.rope_fwd(q, pos, lc.inv_freq);
    // The block's own K/V: k_proj/k_norm/RoPE and v_proj of the convolved rows.
    layer_append_context(lc, w, hc, pos, cache, cache_len);
    Tensor attn = buf({Sq, d.H * d.Dh});
    draft_attention(lc, q, cache, cache_len + Sq, kv_len, att, attn);
    Tensor o = buf({Sq, d.D});
    be.gemm(attn, false, w.wo, true, o);
    Tensor x1 = buf({Sq, d.D});
    conv(be, cw.attn, delta, 1, o, x1);
    be.add_inplace(x1, x, 1.0f);

    // MLP sublayer.
    Tensor h2 = buf({Sq, d.D});
    be.rmsnorm_fwd(x1, w.post_ln, d.eps, h2, f32({Sq}));
    Tensor delta2 = buf({Sq, cw.mlp.proj.dim(0)});
    be.gemm(h2, false, cw.mlp.proj, true, delta2);
    Tensor h2c = buf({Sq, d.D});
    conv(be, cw.mlp, delta2, 0, h2, h2c);
    Tensor gate = buf({Sq, d.I}), up = buf({Sq, d.I}), a = buf({Sq, d.I});
    be.gemm(h2c, false, w.w_gate, true, gate);
    be.gemm(h2c, false, w.w_up, true, up);
    be.swiglu_fwd(gate, up, a);
    Tensor m = buf({Sq, d.D});
    be.gemm(a, false, w.w_down, true, m);
    conv(be, cw.mlp, delta2, 1, m, out);
    be.add_inplace(out, x1, 1.0f);
    lc.ws.release(mark);
}

}  // namespace dflash

// One decoder layer: training forward, backward, and KV-cached inference forward.
// Tested by tests/model/decoder_layer_test.cpp and the target/drafter tests.
#include "model/decoder_layer.h"

#include <cstring>

namespace dflash {

LayerDims layer_dims(const TargetConfig& cfg) {
    DF_CHECK(!cfg.attention_bias,
             "attention_bias=true is not supported (Qwen3 and Llama-3 targets have no attention "
             "biases)");
    DF_CHECK(cfg.num_attention_heads % cfg.num_key_value_heads == 0,
             "num_attention_heads={} is not a multiple of num_key_value_heads={}",
             cfg.num_attention_heads, cfg.num_key_value_heads);
    return LayerDims{cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                     cfg.head_dim,    cfg.intermediate_size,   static_cast<float>(cfg.rms_norm_eps),
                     cfg.qk_norm};
}

namespace {

LayerWeights resolve(const ParamSet& p, const std::string& pre, const LayerDims& d, bool grads) {
    auto get = [&](const std::string& n) { return grads ? p.grad(pre + n) : p.value(pre + n); };
    LayerWeights w;
    w.input_ln = get("input_layernorm.weight");
    w.wq = get("self_attn.q_proj.weight");
    w.wk = get("self_attn.k_proj.weight");
    w.wv = get("self_attn.v_proj.weight");
    if (d.qk_norm) {
        w.q_norm = get("self_attn.q_norm.weight");
        w.k_norm = get("self_attn.k_norm.weight");
    }
    w.wo = get("self_attn.o_proj.weight");
    w.post_ln = get("post_attention_layernorm.weight");
    w.w_gate = get("mlp.gate_proj.weight");
    w.w_up = get("mlp.up_proj.weight");
    w.w_down = get("mlp.down_proj.weight");
    return w;
}

// Rows [0, a) of dst <- a, rows [a, a+b) <- b.
void concat_rows(const Tensor& dst, const Tensor& a, const Tensor& b) {
    if (a.nbytes()) std::memcpy(dst.data(), a.data(), a.nbytes());
    if (b.nbytes()) std::memcpy(static_cast<char*>(dst.data()) + a.nbytes(), b.data(), b.nbytes());
}

// q/k projection tail: optional per-head RMSNorm (saving rstd), then RoPE in place on `out`.
void norm_and_rope(const LayerContext& lc, const Tensor& lin, const Tensor& norm_w,
                   const Tensor& rstd, const Tensor& pos, const Tensor& out) {
    const int64_t rows = out.dim(0) * out.dim(1);
    if (!norm_w.empty()) {
        lc.be.rmsnorm_fwd(lin.reshape({rows, out.dim(2)}), norm_w, lc.dims.eps,
                          out.reshape({rows, out.dim(2)}), rstd);
    } else {
        copy_tensor(out, lin);
    }
    lc.be.rope_fwd(out, pos, lc.inv_freq);
}

// out = x1 + down(silu(gate(h2)) * up(h2)), h2 = post_ln(x1).
void mlp_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& x1,
                 const Tensor& rstd2, const Tensor& h2, const Tensor& gate, const Tensor& up,
                 const Tensor& act, const Tensor& out) {
    Backend& be = lc.be;
    be.rmsnorm_fwd(x1, w.post_ln, lc.dims.eps, h2, rstd2);
    be.gemm(h2, false, w.w_gate, true, gate);
    be.gemm(h2, false, w.w_up, true, up);
    be.swiglu_fwd(gate, up, act);
    copy_tensor(out, x1);
    be.gemm(act, false, w.w_down, true, out, 1.0f, 1.0f);
}

}  // namespace

LayerWeights layer_weights(const ParamSet& p, const std::string& prefix, const LayerDims& d) {
    return resolve(p, prefix, d, false);
}

LayerWeights layer_grads(const ParamSet& p, const std::string& prefix, const LayerDims& d) {
    return resolve(p, prefix, d, true);
}

void layer_forward_train(const LayerContext& lc, const LayerWeights& w, const Tensor& x,
                         const Tensor& ctx, const Tensor& q_pos, const Tensor& kv_pos,
                         const AttnMask& mask, Scratch& sc, const std::string& tag, LayerActs& a,
                         const Tensor& out) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = x.dim(0), Sc = ctx.empty() ? 0 : ctx.dim(0), Sk = Sc + Sq;
    DF_ASSERT(q_pos.numel() == Sq && kv_pos.numel() == Sk, "positions {} / {} for {} + {} rows",
              q_pos.numel(), kv_pos.numel(), Sc, Sq);
    auto buf = [&](const char* n, Shape s) { return sc.get(tag + n, s); };
    a.Sq = Sq;
    a.Sc = Sc;
    a.x = x;
    a.ctx = ctx;
    a.rstd1 = buf(".rstd1", {Sq});
    a.h = buf(".h", {Sq, d.D});
    be.rmsnorm_fwd(x, w.input_ln, d.eps, a.h, a.rstd1);
    if (Sc > 0) {
        a.kv_in = buf(".kv_in", {Sk, d.D});
        concat_rows(a.kv_in, ctx, a.h);
    } else {
        a.kv_in = a.h;
    }
    a.q_lin = buf(".q_lin", {Sq, d.H * d.Dh});
    a.rstd_q = buf(".rstd_q", {Sq * d.H});
    a.q = buf(".q", {Sq, d.H, d.Dh});
    be.gemm(a.h, false, w.wq, true, a.q_lin);
    norm_and_rope(lc, a.q_lin, w.q_norm, a.rstd_q, q_pos, a.q);
    a.k_lin = buf(".k_lin", {Sk, d.Hkv * d.Dh});
    a.rstd_k = buf(".rstd_k", {Sk * d.Hkv});
    a.k = buf(".k", {Sk, d.Hkv, d.Dh});
    a.v = buf(".v", {Sk, d.Hkv, d.Dh});
    be.gemm(a.kv_in, false, w.wk, true, a.k_lin);
    norm_and_rope(lc, a.k_lin, w.k_norm, a.rstd_k, kv_pos, a.k);
    be.gemm(a.kv_in, false, w.wv, true, a.v.reshape({Sk, d.Hkv * d.Dh}));
    a.attn = buf(".attn", {Sq, d.H * d.Dh});
    a.lse = buf(".lse", {d.H, Sq});
    be.attention_fwd(a.q, a.k, a.v, mask, a.attn.reshape({Sq, d.H, d.Dh}), a.lse);
    a.x1 = buf(".x1", {Sq, d.D});
    copy_tensor(a.x1, x);
    be.gemm(a.attn, false, w.wo, true, a.x1, 1.0f, 1.0f);
    a.rstd2 = buf(".rstd2", {Sq});
    a.h2 = buf(".h2", {Sq, d.D});
    a.gate = buf(".gate", {Sq, d.I});
    a.up = buf(".up", {Sq, d.I});
    a.act = buf(".act", {Sq, d.I});
    mlp_forward(lc, w, a.x1, a.rstd2, a.h2, a.gate, a.up, a.act, out);
}

void layer_backward(const LayerContext& lc, const LayerWeights& w, const LayerWeights& g,
                    const LayerActs& a, const Tensor& q_pos, const Tensor& kv_pos,
                    const AttnMask& mask, const Tensor& dout, Scratch& sc, const std::string& tag,
                    const Tensor& dx, const Tensor& dctx) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = a.Sq, Sc = a.Sc, Sk = Sc + Sq;
    auto buf = [&](const char* n, Shape s) { return sc.get(tag + n, s); };

    // MLP: out = x1 + down(act)
    Tensor dact = buf(".d_act", {Sq, d.I});
    be.gemm(dout, false, w.w_down, false, dact);
    be.gemm(dout, true, a.act, false, g.w_down, 1.0f, 1.0f);
    Tensor dgate = buf(".d_gate", {Sq, d.I});
    Tensor dup = buf(".d_up", {Sq, d.I});
    be.swiglu_bwd(dact, a.gate, a.up, dgate, dup);
    Tensor dh2 = buf(".d_h2", {Sq, d.D});
    be.gemm(dgate, false, w.w_gate, false, dh2);
    be.gemm(dup, false, w.w_up, false, dh2, 1.0f, 1.0f);
    be.gemm(dgate, true, a.h2, false, g.w_gate, 1.0f, 1.0f);
    be.gemm(dup, true, a.h2, false, g.w_up, 1.0f, 1.0f);
    Tensor dx1 = buf(".d_x1", {Sq, d.D});
    be.rmsnorm_bwd(dh2, a.x1, w.post_ln, a.rstd2, dx1, g.post_ln);
    be.add_inplace(dx1, dout, 1.0f);

    // Attention: x1 = x + o_proj(attn)
    Tensor dattn = buf(".d_attn", {Sq, d.H * d.Dh});
    be.gemm(dx1, false, w.wo, false, dattn);
    be.gemm(dx1, true, a.attn, false, g.wo, 1.0f, 1.0f);
    Tensor dq = buf(".d_q", {Sq, d.H, d.Dh});
    Tensor dk = buf(".d_k", {Sk, d.Hkv, d.Dh});
    Tensor dv = buf(".d_v", {Sk, d.Hkv, d.Dh});
    be.attention_bwd(dattn.reshape({Sq, d.H, d.Dh}), a.q, a.k, a.v, a.attn.reshape({Sq, d.H, d.Dh}),
                     a.lse, mask, dq, dk, dv);
    be.rope_bwd(dq, q_pos, lc.inv_freq);
    be.rope_bwd(dk, kv_pos, lc.inv_freq);
    Tensor dq_lin = dq.reshape({Sq, d.H * d.Dh});
    Tensor dk_lin = dk.reshape({Sk, d.Hkv * d.Dh});
    if (d.qk_norm) {
        dq_lin = buf(".d_q_lin", {Sq, d.H * d.Dh});
        dk_lin = buf(".d_k_lin", {Sk, d.Hkv * d.Dh});
        be.rmsnorm_bwd(dq.reshape({Sq * d.H, d.Dh}), a.q_lin.reshape({Sq * d.H, d.Dh}), w.q_norm,
                       a.rstd_q, dq_lin.reshape({Sq * d.H, d.Dh}), g.q_norm);
        be.rmsnorm_bwd(dk.reshape({Sk * d.Hkv, d.Dh}), a.k_lin.reshape({Sk * d.Hkv, d.Dh}),
                       w.k_norm, a.rstd_k, dk_lin.reshape({Sk * d.Hkv, d.Dh}), g.k_norm);
    }
    Tensor dv_lin = dv.reshape({Sk, d.Hkv * d.Dh});
    be.gemm(dq_lin, true, a.h, false, g.wq, 1.0f, 1.0f);
    be.gemm(dk_lin, true, a.kv_in, false, g.wk, 1.0f, 1.0f);
    be.gemm(dv_lin, true, a.kv_in, false, g.wv, 1.0f, 1.0f);
    Tensor dkv_in = buf(".d_kv_in", {Sk, d.D});
    be.gemm(dk_lin, false, w.wk, false, dkv_in);
    be.gemm(dv_lin, false, w.wv, false, dkv_in, 1.0f, 1.0f);
    if (Sc > 0) be.add_inplace(dctx, dkv_in.rows(0, Sc), 1.0f);
    Tensor dh = buf(".d_h", {Sq, d.D});
    copy_tensor(dh, dkv_in.rows(Sc, Sk));
    be.gemm(dq_lin, false, w.wq, false, dh, 1.0f, 1.0f);
    be.rmsnorm_bwd(dh, a.x, w.input_ln, a.rstd1, dx, g.input_ln);
    be.add_inplace(dx, dx1, 1.0f);
}

void layer_forward_cached(const LayerContext& lc, const LayerWeights& w, const Tensor& x,
                          const Tensor& ctx, const Tensor& q_pos, const Tensor& kv_pos,
                          LayerKvCache& cache, int64_t cache_len, AttnMaskKind kind, Scratch& sc,
                          const Tensor& out) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = x.dim(0), Sc = ctx.empty() ? 0 : ctx.dim(0), Snew = Sc + Sq;
    const int64_t total = cache_len + Snew;
    DF_CHECK(total <= cache.k.dim(0),
             "KV cache overflow: {} rows needed but the cache holds {} (raise the context size)",
             total, cache.k.dim(0));
    Tensor h = sc.get("h", {Sq, d.D});
    be.rmsnorm_fwd(x, w.input_ln, d.eps, h, sc.get("rstd", {Sq}));
    Tensor kv_in = h;
    if (Sc > 0) {
        kv_in = sc.get("kv_in", {Snew, d.D});
        concat_rows(kv_in, ctx, h);
    }
    Tensor q_lin = sc.get("q_lin", {Sq, d.H * d.Dh});
    Tensor q = sc.get("q", {Sq, d.H, d.Dh});
    be.gemm(h, false, w.wq, true, q_lin);
    norm_and_rope(lc, q_lin, w.q_norm, sc.get("rstd_q", {Sq * d.H}), q_pos, q);
    Tensor k_lin = sc.get("k_lin", {Snew, d.Hkv * d.Dh});
    Tensor k_new = cache.k.view().rows(cache_len, total);
    Tensor v_new = cache.v.view().rows(cache_len, total);
    be.gemm(kv_in, false, w.wk, true, k_lin);
    norm_and_rope(lc, k_lin, w.k_norm, sc.get("rstd_k", {Snew * d.Hkv}), kv_pos, k_new);
    be.gemm(kv_in, false, w.wv, true, v_new.reshape({Snew, d.Hkv * d.Dh}));
    Tensor attn = sc.get("attn", {Sq, d.H * d.Dh});
    const AttnMask mask =
        kind == AttnMaskKind::causal ? AttnMask::causal(cache_len + Sc) : AttnMask::full();
    be.attention_fwd(q, cache.k.view().rows(0, total), cache.v.view().rows(0, total), mask,
                     attn.reshape({Sq, d.H, d.Dh}), Tensor());
    Tensor x1 = sc.get("x1", {Sq, d.D});
    copy_tensor(x1, x);
    be.gemm(attn, false, w.wo, true, x1, 1.0f, 1.0f);
    mlp_forward(lc, w, x1, sc.get("rstd2", {Sq}), sc.get("h2", {Sq, d.D}),
                sc.get("gate", {Sq, d.I}), sc.get("up", {Sq, d.I}), sc.get("act", {Sq, d.I}), out);
}

}  // namespace dflash

// One decoder layer: training forward, backward, and KV-cached inference forward.
// Tested by tests/model/decoder_layer_test.cpp and the target/drafter tests.
#include "model/decoder_layer.h"

#include <algorithm>

#include "model/gdn_layer.h"
#include "model/rope_yarn.h"

namespace dflash {

LayerDims layer_dims(const TargetConfig& cfg) {
    DF_CHECK(cfg.num_attention_heads % cfg.num_key_value_heads == 0,
             "num_attention_heads={} is not a multiple of num_key_value_heads={}",
             cfg.num_attention_heads, cfg.num_key_value_heads);
    LayerDims d{cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads,
                cfg.head_dim,    cfg.intermediate_size,   static_cast<float>(cfg.rms_norm_eps),
                cfg.qk_norm,     cfg.qkv_bias(),          cfg.o_bias()};
    const double f = rope_attention_factor(cfg.rope.scaling);
    d.q_scale = static_cast<float>(f * f);
    d.E = cfg.num_experts;
    d.k = cfg.num_experts_per_tok;
    d.Ie = cfg.moe_intermediate_size;
    d.gpt_oss_router = cfg.gpt_oss();
    d.norm_topk = cfg.norm_topk_prob;
    d.swiglu_limit = static_cast<float>(cfg.swiglu_limit);
    d.Is = cfg.shared_expert_intermediate_size;
    d.lin_hk = cfg.linear_num_key_heads;
    d.lin_dk = cfg.linear_key_head_dim;
    d.lin_hv = cfg.linear_num_value_heads;
    d.lin_dv = cfg.linear_value_head_dim;
    d.lin_kernel = cfg.linear_conv_kernel_dim;
    return d;
}

namespace {

// The layout (target_tensor_specs) says which feed-forward a layer has.
void resolve_feed_forward(const ParamSet& p, const std::string& pre, bool grads, LayerWeights& w) {
    auto get = [&](const std::string& n) { return grads ? p.grad(pre + n) : p.value(pre + n); };
    // MoE layers have a router (their expert matrices may be packed outside the ParamSet:
    // model/expert_weights.h).
    const bool router = p.has(pre + "mlp.router.weight");  // gpt-oss; qwen3_moe: mlp.gate
    if (!router && !p.has(pre + "mlp.gate.weight")) {
        w.w_gate = get("mlp.gate_proj.weight");
        w.w_up = get("mlp.up_proj.weight");
        w.w_down = get("mlp.down_proj.weight");
        return;
    }
    w.router = get(router ? "mlp.router.weight" : "mlp.gate.weight");
    if (router) w.router_bias = get("mlp.router.bias");
    if (p.has(pre + "mlp.experts.gate_up_proj")) {
        w.experts_gate_up = get("mlp.experts.gate_up_proj");
        w.experts_down = get("mlp.experts.down_proj");
    }
    if (p.has(pre + "mlp.experts.gate_up_proj_bias")) {
        w.experts_gate_up_bias = get("mlp.experts.gate_up_proj_bias");
        w.experts_down_bias = get("mlp.experts.down_proj_bias");
    }
    if (p.has(pre + "mlp.shared_expert.gate_proj.weight")) {
        w.shared_gate_proj = get("mlp.shared_expert.gate_proj.weight");
        w.shared_up_proj = get("mlp.shared_expert.up_proj.weight");
        w.shared_down_proj = get("mlp.shared_expert.down_proj.weight");
        w.shared_gate = get("mlp.shared_expert_gate.weight");
    }
}

// A Gated DeltaNet mixer: Qwen3.5's split projections, or Qwen3-Next's fused ones as row ranges
// (their rows were regrouped at load, model/hybrid_weights.h).
void resolve_linear(const ParamSet& p, const std::string& pre, const LayerDims& d, bool grads,
                    LayerWeights& w) {
    auto get = [&](const std::string& n) {
        return grads ? p.grad(pre + "linear_attn." + n) : p.value(pre + "linear_attn." + n);
    };
    const int64_t c = d.lin_conv_dim(), vd = d.lin_hv * d.lin_dv;
    if (p.has(pre + "linear_attn.in_proj_qkvz.weight")) {
        const Tensor qkvz = get("in_proj_qkvz.weight"), ba = get("in_proj_ba.weight");
        if (!qkvz.empty()) {
            w.lin_qkv = qkvz.rows(0, c);
            w.lin_z = qkvz.rows(c, c + vd);
            w.lin_b = ba.rows(0, d.lin_hv);
            w.lin_a = ba.rows(d.lin_hv, 2 * d.lin_hv);
        }
    } else {
        w.lin_qkv = get("in_proj_qkv.weight");
        w.lin_z = get("in_proj_z.weight");
        w.lin_b = get("in_proj_b.weight");
        w.lin_a = get("in_proj_a.weight");
    }
    const Tensor conv = get("conv1d.weight");
    if (!conv.empty()) w.lin_conv = conv.reshape({c, d.lin_kernel});
    w.lin_a_log = get("A_log");
    w.lin_dt_bias = get("dt_bias");
    w.lin_norm = get("norm.weight");
    w.lin_out = get("out_proj.weight");
}

LayerWeights resolve(const ParamSet& p, const std::string& pre, const LayerDims& d, bool grads) {
    auto get = [&](const std::string& n) { return grads ? p.grad(pre + n) : p.value(pre + n); };
    LayerWeights w;
    w.input_ln = get("input_layernorm.weight");
    w.post_ln = get("post_attention_layernorm.weight");
    resolve_feed_forward(p, pre, grads, w);
    if (p.has(pre + "linear_attn.out_proj.weight")) {
        resolve_linear(p, pre, d, grads, w);
        return w;
    }
    w.wq = get("self_attn.q_proj.weight");
    // The hybrid families' gated attention: q_proj's rows were regrouped at load into all query
    // rows, then all gate rows (model/hybrid_weights.h).
    if (!w.wq.empty() && w.wq.dim(0) == 2 * d.H * d.Dh) {
        w.wq_gate = w.wq.rows(d.H * d.Dh, 2 * d.H * d.Dh);
        w.wq = w.wq.rows(0, d.H * d.Dh);
    }
    w.wk = get("self_attn.k_proj.weight");
    w.wv = get("self_attn.v_proj.weight");
    if (d.qkv_bias) {
        w.bq = get("self_attn.q_proj.bias");
        w.bk = get("self_attn.k_proj.bias");
        w.bv = get("self_attn.v_proj.bias");
    }
    if (d.o_bias) w.bo = get("self_attn.o_proj.bias");
    if (d.qk_norm) {
        w.q_norm = get("self_attn.q_norm.weight");
        w.k_norm = get("self_attn.k_norm.weight");
    }
    w.wo = get("self_attn.o_proj.weight");
    return w;
}

// y = x · Wᵀ (+ bias when the model has one), or y += that when accumulate; through W's prepared
// copy when lc has one.
void project(const LayerContext& lc, const Tensor& x, const Tensor& w, const Tensor& bias,
             const Tensor& y, bool accumulate = false) {
    linear(lc.be, lc.prepared, x, w, y, accumulate ? 1.0f : 0.0f);
    if (!bias.empty())
        lc.be.add_row_bias(y.reshape({y.numel() / bias.numel(), bias.numel()}), bias);
}

// The hybrid families' gated attention: attn [Sq, H*Dh] *= sigmoid(hq · wq_gateᵀ) (forward
// only: these targets are frozen). A no-op for other layers.
void apply_output_gate(const LayerContext& lc, const LayerWeights& w, const Tensor& hq,
                       const Tensor& attn) {
    if (w.wq_gate.empty()) return;
    const Workspace::Mark mark = lc.ws.mark();
    const Tensor gate = lc.ws.take(attn.shape(), lc.be.compute_dtype());
    linear(lc.be, lc.prepared, hq, w.wq_gate, gate);
    lc.be.sigmoid_mul(attn, gate, attn);
    lc.ws.release(mark);
}

// Rows [0, a) of dst <- a, rows [a, a+b) <- b.
void concat_rows(Backend& be, const Tensor& dst, const Tensor& a, const Tensor& b) {
    const int64_t na = a.dim(0), nb = b.dim(0);
    be.copy(dst.rows(0, na), a);
    be.copy(dst.rows(na, na + nb), b);
}

// q/k projection tail: optional per-head RMSNorm (saving rstd), then RoPE in place on `out`.
void norm_and_rope(const LayerContext& lc, const Tensor& lin, const Tensor& norm_w,
                   const Tensor& rstd, const Tensor& pos, const Tensor& out) {
    const int64_t rows = out.dim(0) * out.dim(1);
    if (!norm_w.empty()) {
        lc.be.rmsnorm_fwd(lin.reshape({rows, out.dim(2)}), norm_w, lc.dims.eps,
                          out.reshape({rows, out.dim(2)}), rstd);
    } else {
        lc.be.copy(out, lin);
    }
    lc.be.rope_fwd(out, pos, lc.inv_freq);
}

// Note [q recomputed]: a training forward keeps q before its norm and RoPE (q_lin, which the
// norm's backward reads anyway) and the norm's rstd, not q itself: the backward makes q again
// with the same kernels on the same inputs, bit for bit, into one of its temporaries (rstd
// empty: not written again). At an 8B
// drafter's 8192 rows that is 64 MiB a layer fewer at the step's peak for two cheap element-wise
// passes.
void q_from_lin(const LayerContext& lc, const LayerWeights& w, const Tensor& q_lin,
                const Tensor& rstd, const Tensor& q_pos, const Tensor& q) {
    norm_and_rope(lc, q_lin, w.q_norm, rstd, q_pos, q);
    // YaRN's attention factor: transformers scales cos and sin (so q and k) by f; q alone by f².
    if (lc.dims.q_scale != 1.0f) lc.be.scale_inplace(q, lc.dims.q_scale);
}

// y (+)= the experts' output for the rows h2 [R, D] of an MoE layer: router logits in f32 (gemm,
// plus gpt-oss's bias), the k experts of every row and their weights (moe_route), their weighted
// sum (moe_experts). Forward only (targets are frozen); its temporaries are given back.
void moe_core_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& h2,
                      const Tensor& y, bool accumulate) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t R = h2.dim(0);
    const Workspace::Mark mark = lc.ws.mark();
    const Tensor logits = lc.ws.take({R, d.E}, DType::f32);
    be.gemm(h2, false, w.router, true, logits);
    if (!w.router_bias.empty()) be.add_row_bias(logits, w.router_bias);
    const Tensor experts = lc.ws.take({R, d.k}, DType::i32);
    const Tensor weights = lc.ws.take({R, d.k}, DType::f32);
    MoeRouting routing;
    routing.kind = d.gpt_oss_router ? MoeRouterKind::topk_softmax : MoeRouterKind::softmax_topk;
    routing.k = d.k;
    routing.normalize = d.norm_topk;
    be.moe_route(logits, routing, experts, weights);
    MoeExperts ex;
    ex.gate_up = w.experts_gate_up;
    ex.gate_up_bias = w.experts_gate_up_bias;
    ex.down = w.experts_down;
    ex.down_bias = w.experts_down_bias;
    ex.gate_up_blocks = w.experts_gate_up_blocks;
    ex.gate_up_scales = w.experts_gate_up_scales;
    ex.down_blocks = w.experts_down_blocks;
    ex.down_scales = w.experts_down_scales;
    if (d.swiglu_limit > 0) {
        ex.activation = MoeActivation::clamped_swiglu;
        ex.limit = d.swiglu_limit;
    }
    if (accumulate) {
        const Tensor part = lc.ws.take({R, d.D}, be.compute_dtype());
        be.moe_experts(h2, experts, weights, ex, part);
        be.add_inplace(y, part, 1.0f);
    } else {
        be.moe_experts(h2, experts, weights, ex, y);
    }
    if (!w.shared_gate_proj.empty()) {
        // The hybrid families' shared expert: y += sigmoid(h2 · shared_gateᵀ) * swiglu MLP(h2).
        const DType act = be.compute_dtype();
        const Tensor g = lc.ws.take({R, d.Is}, act), u = lc.ws.take({R, d.Is}, act);
        linear(be, lc.prepared, h2, w.shared_gate_proj, g);
        linear(be, lc.prepared, h2, w.shared_up_proj, u);
        const Tensor a = lc.ws.take({R, d.Is}, act);
        be.swiglu_fwd(g, u, a);
        const Tensor shared = lc.ws.take({R, d.D}, act);
        linear(be, lc.prepared, a, w.shared_down_proj, shared);
        const Tensor logit = lc.ws.take({R, 1}, DType::f32);
        be.gemm(h2, false, w.shared_gate, true, logit);
        be.add_sigmoid_scaled(y, shared, logit);
    }
    lc.ws.release(mark);
}

// out = x1 + down(silu(gate(h2)) * up(h2)), h2 = post_ln(x1).
void mlp_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& x1,
                 const Tensor& rstd2, const Tensor& h2, const Tensor& gate, const Tensor& up,
                 const Tensor& act, const Tensor& out) {
    Backend& be = lc.be;
    be.rmsnorm_fwd(x1, w.post_ln, lc.dims.eps, h2, rstd2);
    if (w.moe()) {
        be.copy(out, x1);
        moe_core_forward(lc, w, h2, out, true);
        return;
    }
    linear(be, lc.prepared, h2, w.w_gate, gate);
    linear(be, lc.prepared, h2, w.w_up, up);
    be.swiglu_fwd(gate, up, act);
    be.copy(out, x1);
    linear(be, lc.prepared, act, w.w_down, out, 1.0f);
}

}  // namespace

DeviceTensor upload_inv_freq(Backend& be, const RopeConfig& rope, int64_t rotary_dim) {
    const std::vector<float> f = rope.scaling.type == RopeScalingType::yarn
                                     ? yarn_inv_freq(rope, rotary_dim)
                                     : rope_inv_freq(rope, rotary_dim);
    const auto n = static_cast<int64_t>(f.size());
    DeviceTensor t(be, {n}, DType::f32);
    from_host_f32(be, t, HostTensor::from_f32({n}, f).view());
    return t;
}

LayerWeights layer_weights(const ParamSet& p, const std::string& prefix, const LayerDims& d) {
    return resolve(p, prefix, d, false);
}

LayerWeights layer_grads(const ParamSet& p, const std::string& prefix, const LayerDims& d) {
    return resolve(p, prefix, d, true);
}

void attention_core_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& hq,
                            const Tensor& ctx, const Tensor& q_pos, const Tensor& kv_pos,
                            const AttnMask& mask, LayerActs& a, const Tensor& o, bool accumulate,
                            const Tensor& kv_in) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = hq.dim(0), Sc = ctx.empty() ? 0 : ctx.dim(0), Sk = Sc + Sq;
    DF_ASSERT(q_pos.numel() == Sq && kv_pos.numel() == Sk, "positions {} / {} for {} + {} rows",
              q_pos.numel(), kv_pos.numel(), Sc, Sq);
    const DType act = be.compute_dtype();
    auto buf = [&](Shape s) { return lc.ws.take(s, act); };
    auto f32 = [&](Shape s) { return lc.ws.take(s, DType::f32); };
    a.Sq = Sq;
    a.Sc = Sc;
    a.ctx = ctx;
    a.h = hq;
    if (!kv_in.empty()) {
        DF_ASSERT(kv_in.dim(0) == Sk && kv_in.rows(Sc, Sk).data() == hq.data(),
                  "attention_core_forward: kv_in must hold hq in its last {} rows", Sq);
        if (Sc > 0) be.copy(kv_in.rows(0, Sc), ctx);
        a.kv_in = kv_in;
    } else if (Sc > 0) {
        a.kv_in = buf({Sk, d.D});
        concat_rows(be, a.kv_in, ctx, hq);
    } else {
        a.kv_in = hq;
    }
    a.q_lin = buf({Sq, d.H * d.Dh});
    a.rstd_q = f32({Sq * d.H});
    project(lc, hq, w.wq, w.bq, a.q_lin);
    a.k_lin = buf({Sk, d.Hkv * d.Dh});
    a.rstd_k = f32({Sk * d.Hkv});
    a.k = buf({Sk, d.Hkv, d.Dh});
    a.v = buf({Sk, d.Hkv, d.Dh});
    project(lc, a.kv_in, w.wk, w.bk, a.k_lin);
    norm_and_rope(lc, a.k_lin, w.k_norm, a.rstd_k, kv_pos, a.k);
    project(lc, a.kv_in, w.wv, w.bv, a.v.reshape({Sk, d.Hkv * d.Dh}));
    a.attn = buf({Sq, d.H * d.Dh});
    a.lse = f32({d.H, Sq});
    // gpt-oss's sinks join every softmax of this layer (the caller's mask gives the window).
    AttnMask m = mask;
    if (!w.sinks.empty()) m.sinks = w.sinks;
    const Workspace::Mark mark = lc.ws.mark();
    const Tensor q = buf({Sq, d.H, d.Dh});  // not kept: Note [q recomputed]
    q_from_lin(lc, w, a.q_lin, a.rstd_q, q_pos, q);
    be.attention_fwd(q, a.k, a.v, m, a.attn.reshape({Sq, d.H, d.Dh}), a.lse);
    lc.ws.release(mark);
    apply_output_gate(lc, w, hq, a.attn);
    project(lc, a.attn, w.wo, w.bo, o, accumulate);
}

namespace {

// The dense MLP's products from h2 into the caller's gate and up [Sq, I], and
// y (+)= down(silu(gate) * up). Note [SwiGLU recomputed]: silu(gate) * up is a temporary, not
// kept for the backward.
void mlp_products(const LayerContext& lc, const LayerWeights& w, const Tensor& h2,
                  const Tensor& gate, const Tensor& up, const Tensor& y, bool accumulate) {
    Backend& be = lc.be;
    be.gemm(h2, false, w.w_gate, true, gate);
    be.gemm(h2, false, w.w_up, true, up);
    const Workspace::Mark mark = lc.ws.mark();
    const Tensor act = lc.ws.take(gate.shape(), be.compute_dtype());
    be.swiglu_fwd(gate, up, act);
    be.gemm(act, false, w.w_down, true, y, 1.0f, accumulate ? 1.0f : 0.0f);
    lc.ws.release(mark);
}

// The MLP in two parts, so that a caller can take what the backward keeps (a dense layer's gate
// and up) before a temporary h2 it gives back afterwards (Note [h2 recomputed]).
void take_mlp_acts(const LayerContext& lc, const LayerWeights& w, int64_t Sq, LayerActs& a) {
    if (w.moe()) return;
    a.gate = lc.ws.take({Sq, lc.dims.I}, lc.be.compute_dtype());
    a.up = lc.ws.take({Sq, lc.dims.I}, lc.be.compute_dtype());
}
void run_mlp(const LayerContext& lc, const LayerWeights& w, const Tensor& h2, const LayerActs& a,
             const Tensor& y, bool accumulate) {
    if (w.moe())
        moe_core_forward(lc, w, h2, y, accumulate);
    else
        mlp_products(lc, w, h2, a.gate, a.up, y, accumulate);
}

}  // namespace

void mlp_core_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& h2, LayerActs& a,
                      const Tensor& y, bool accumulate) {
    a.h2 = h2;
    take_mlp_acts(lc, w, h2.dim(0), a);
    run_mlp(lc, w, h2, a, y, accumulate);
}

void layer_forward_train(const LayerContext& lc, const LayerWeights& w, const Tensor& x,
                         const Tensor& ctx, const Tensor& q_pos, const Tensor& kv_pos,
                         const AttnMask& mask, LayerActs& a, const Tensor& out) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = x.dim(0);
    const DType act = be.compute_dtype();
    a.x = x;
    a.rstd1 = lc.ws.take({Sq}, DType::f32);
    // input_layernorm(x) is written straight into the last rows of [ctx ; h], the rows K and V
    // are projected from: kept once, not also on its own (64 MiB a layer at an 8B drafter's
    // 8192 rows).
    const int64_t Sc = ctx.empty() ? 0 : ctx.dim(0);
    const Tensor kv_in = lc.ws.take({Sc + Sq, d.D}, act);
    const Tensor h = kv_in.rows(Sc, Sc + Sq);
    be.rmsnorm_fwd(x, w.input_ln, d.eps, h, a.rstd1);
    a.x1 = lc.ws.take({Sq, d.D}, act);
    be.copy(a.x1, x);
    attention_core_forward(lc, w, h, ctx, q_pos, kv_pos, mask, a, a.x1, true, kv_in);
    a.rstd2 = lc.ws.take({Sq}, DType::f32);
    // Note [h2 recomputed]: post_attention_layernorm(x1) is a temporary here (gate and up are taken
    // before it, so that it can be given back); the backward makes it again from x1, bit for bit,
    // with one RMSNorm: 64 MiB a layer fewer at an 8B drafter's 8192 rows.
    take_mlp_acts(lc, w, Sq, a);
    const Workspace::Mark mark = lc.ws.mark();
    const Tensor h2 = lc.ws.take({Sq, d.D}, act);
    be.rmsnorm_fwd(a.x1, w.post_ln, d.eps, h2, a.rstd2);
    be.copy(out, a.x1);
    run_mlp(lc, w, h2, a, out, true);
    lc.ws.release(mark);
    a.h2 = Tensor();
}

void mlp_core_backward(const LayerContext& lc, const LayerWeights& w, const LayerWeights& g,
                       const LayerActs& a, const Tensor& dy, const Tensor& dh2) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = a.Sq;
    DF_CHECK(!w.moe(),
             "training through a mixture-of-experts layer is not supported: such targets are "
             "frozen (drafters are dense)");
    // Note [SwiGLU recomputed]: the forward kept gate and up, not silu(gate) * up (an 8B
    // drafter's [8192, 12288] a layer: 192 MiB). The same kernel on the same inputs gives it
    // again, bit for bit, into the buffer that then takes its gradient; the gradients of gate and
    // up overwrite gate and up (swiglu_bwd reads each element before writing it). So the MLP's
    // backward needs one [Sq, I] buffer where it needed three, and a layer keeps two where it
    // kept three; the price is one element-wise pass a layer.
    const Tensor act_then_dact = lc.ws.take({Sq, d.I}, be.compute_dtype());
    be.swiglu_fwd(a.gate, a.up, act_then_dact);
    be.gemm(dy, true, act_then_dact, false, g.w_down, 1.0f, 1.0f);
    be.gemm(dy, false, w.w_down, false, act_then_dact);
    const Tensor& dgate = a.gate;
    const Tensor& dup = a.up;
    be.swiglu_bwd(act_then_dact, a.gate, a.up, dgate, dup);
    be.gemm(dgate, false, w.w_gate, false, dh2);
    be.gemm(dup, false, w.w_up, false, dh2, 1.0f, 1.0f);
    be.gemm(dgate, true, a.h2, false, g.w_gate, 1.0f, 1.0f);
    be.gemm(dup, true, a.h2, false, g.w_up, 1.0f, 1.0f);
}

void attention_core_backward(const LayerContext& lc, const LayerWeights& w, const LayerWeights& g,
                             const LayerActs& a, const Tensor& q_pos, const Tensor& kv_pos,
                             const AttnMask& mask, const Tensor& d_o, const Tensor& dhq,
                             const Tensor& dctx) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = a.Sq, Sc = a.Sc, Sk = Sc + Sq;
    DF_CHECK(w.bq.empty() && w.bo.empty(),
             "training a model with attention biases (Qwen2) is not supported: such targets are "
             "frozen (drafters have no biases)");
    auto buf = [&](Shape s) { return lc.ws.take(s, be.compute_dtype()); };
    Tensor dattn = buf({Sq, d.H * d.Dh});
    be.gemm(d_o, false, w.wo, false, dattn);
    be.gemm(d_o, true, a.attn, false, g.wo, 1.0f, 1.0f);
    // Note [q recomputed] (its norm's rstd is not written again: the saved one has its bits).
    const Tensor q = buf({Sq, d.H, d.Dh});
    q_from_lin(lc, w, a.q_lin, Tensor(), q_pos, q);
    Tensor dq = buf({Sq, d.H, d.Dh});
    Tensor dk = buf({Sk, d.Hkv, d.Dh});
    Tensor dv = buf({Sk, d.Hkv, d.Dh});
    be.attention_bwd(dattn.reshape({Sq, d.H, d.Dh}), q, a.k, a.v, a.attn.reshape({Sq, d.H, d.Dh}),
                     a.lse, mask, dq, dk, dv);
    if (d.q_scale != 1.0f) be.scale_inplace(dq, d.q_scale);
    be.rope_bwd(dq, q_pos, lc.inv_freq);
    be.rope_bwd(dk, kv_pos, lc.inv_freq);
    Tensor dq_lin = dq.reshape({Sq, d.H * d.Dh});
    Tensor dk_lin = dk.reshape({Sk, d.Hkv * d.Dh});
    if (d.qk_norm) {
        dq_lin = buf({Sq, d.H * d.Dh});
        dk_lin = buf({Sk, d.Hkv * d.Dh});
        be.rmsnorm_bwd(dq.reshape({Sq * d.H, d.Dh}), a.q_lin.reshape({Sq * d.H, d.Dh}), w.q_norm,
                       a.rstd_q, dq_lin.reshape({Sq * d.H, d.Dh}), g.q_norm);
        be.rmsnorm_bwd(dk.reshape({Sk * d.Hkv, d.Dh}), a.k_lin.reshape({Sk * d.Hkv, d.Dh}),
                       w.k_norm, a.rstd_k, dk_lin.reshape({Sk * d.Hkv, d.Dh}), g.k_norm);
    }
    Tensor dv_lin = dv.reshape({Sk, d.Hkv * d.Dh});
    be.gemm(dq_lin, true, a.h, false, g.wq, 1.0f, 1.0f);
    be.gemm(dk_lin, true, a.kv_in, false, g.wk, 1.0f, 1.0f);
    be.gemm(dv_lin, true, a.kv_in, false, g.wv, 1.0f, 1.0f);
    Tensor dkv_in = buf({Sk, d.D});
    be.gemm(dk_lin, false, w.wk, false, dkv_in);
    be.gemm(dv_lin, false, w.wv, false, dkv_in, 1.0f, 1.0f);
    if (Sc > 0) be.add_inplace(dctx, dkv_in.rows(0, Sc), 1.0f);
    be.copy(dhq, dkv_in.rows(Sc, Sk));
    be.gemm(dq_lin, false, w.wq, false, dhq, 1.0f, 1.0f);
}

void layer_backward(const LayerContext& lc, const LayerWeights& w, const LayerWeights& g,
                    const LayerActs& a, const Tensor& q_pos, const Tensor& kv_pos,
                    const AttnMask& mask, const Tensor& dout, const Tensor& dx,
                    const Tensor& dctx) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = a.Sq;
    const Workspace::Mark mark = lc.ws.mark();
    auto buf = [&](Shape s) { return lc.ws.take(s, be.compute_dtype()); };
    // MLP: out = x1 + down(act), from h2 made again (Note [h2 recomputed]).
    Tensor dh2 = buf({Sq, d.D});
    LayerActs with_h2 = a;
    with_h2.h2 = buf({Sq, d.D});
    be.rmsnorm_fwd(a.x1, w.post_ln, d.eps, with_h2.h2, Tensor());
    mlp_core_backward(lc, w, g, with_h2, dout, dh2);
    Tensor dx1 = buf({Sq, d.D});
    be.rmsnorm_bwd(dh2, a.x1, w.post_ln, a.rstd2, dx1, g.post_ln);
    be.add_inplace(dx1, dout, 1.0f);
    // Attention: x1 = x + o_proj(attn)
    Tensor dh = buf({Sq, d.D});
    attention_core_backward(lc, w, g, a, q_pos, kv_pos, mask, dx1, dh, dctx);
    be.rmsnorm_bwd(dh, a.x, w.input_ln, a.rstd1, dx, g.input_ln);
    be.add_inplace(dx, dx1, 1.0f);
    lc.ws.release(mark);
}

namespace {

// K/V of rows `in` [n, D] (already normed for a layer's own tokens) into cache rows
// [row0[0], row0[0]+n): computed into temporaries, then placed at the device-held row.
void write_kv(const LayerContext& lc, const LayerWeights& w, const Tensor& in, const Tensor& pos,
              LayerKvCache& cache, const Tensor& row0) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t n = in.dim(0);
    const Tensor k_lin = lc.ws.take({n, d.Hkv * d.Dh}, be.compute_dtype());
    project(lc, in, w.wk, w.bk, k_lin);
    const Tensor k = lc.ws.take({n, d.Hkv, d.Dh}, be.compute_dtype());
    norm_and_rope(lc, k_lin, w.k_norm, lc.ws.take({n * d.Hkv}, DType::f32), pos, k);
    be.write_rows(cache.k.view(), row0, k);
    const Tensor v = lc.ws.take({n, d.Hkv, d.Dh}, be.compute_dtype());
    project(lc, in, w.wv, w.bv, v.reshape({n, d.Hkv * d.Dh}));
    be.write_rows(cache.v.view(), row0, v);
}

}  // namespace

void linear_layer_forward(const LayerContext& lc, const LayerWeights& w, const Tensor& x,
                          const LinearState& st, LinearMode mode, const Tensor& count,
                          const LinearSaved* save, const Tensor& out) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t S = x.dim(0);
    const Workspace::Mark mark = lc.ws.mark();
    const DType act = be.compute_dtype();
    auto buf = [&](Shape s) { return lc.ws.take(s, act); };
    auto f32 = [&](Shape s) { return lc.ws.take(s, DType::f32); };
    const Tensor h = buf({S, d.D});
    be.rmsnorm_fwd(x, w.input_ln, d.eps, h, Tensor());
    const Tensor x1 = buf({S, d.D});
    be.copy(x1, x);
    gdn_mixer_forward(lc, w, h, st, mode, count, save, x1, true);
    mlp_forward(lc, w, x1, f32({S}), buf({S, d.D}), buf({S, d.I}), buf({S, d.I}), buf({S, d.I}),
                out);
    lc.ws.release(mark);
}

void layer_append_context(const LayerContext& lc, const LayerWeights& w, const Tensor& ctx,
                          const Tensor& pos, LayerKvCache& cache, const Tensor& row0) {
    const Workspace::Mark mark = lc.ws.mark();
    write_kv(lc, w, ctx, pos, cache, row0);
    lc.ws.release(mark);
}

bool rows_linear_pays(const RowsLimits& limits, std::initializer_list<Tensor> weights) {
    int64_t bytes = 0;
    for (const Tensor& w : weights) bytes += static_cast<int64_t>(w.nbytes());
    return bytes <= limits.max_product_bytes &&
           (weights.size() > 1 || bytes <= limits.max_single_bytes);
}

namespace {

// y = residual + x · Wᵀ in a decode block (y may alias residual).
void add_product(const LayerContext& lc, const Tensor& x, const Tensor& w, const Tensor& residual,
                 const Tensor& y) {
    Backend& be = lc.be;
    if (rows_linear_pays(lc.rows_limits, {w})) {
        RowsLinear p;
        p.w[0] = w;
        p.epilogue = RowsEpilogue::add;
        be.rows_linear(x, p, residual, y);
        return;
    }
    if (y.data() != residual.data()) be.copy(y, residual);
    be.gemm(x, false, w, true, y, 1.0f, 1.0f);
}

// Whether a cached forward of Sq rows goes through the decode-block ops: a plain attention layer
// (no projection biases, no output gate, no YaRN q scale) with a dense SwiGLU MLP.
bool rows_path(const LayerContext& lc, const LayerWeights& w, int64_t Sq) {
    return lc.rows_ops && Sq <= kRowsLinearMaxRows && !w.moe() && w.bq.empty() && w.bk.empty() &&
           w.bv.empty() && w.bo.empty() && w.wq_gate.empty() && lc.dims.q_scale == 1.0f;
}

// layer_forward_cached through the decode-block ops: RMSNorm; q/k/v in one product; head norms,
// RoPE and the cache write in one kernel; attention over the cache; o_proj with the residual add;
// RMSNorm; gate/up with SwiGLU in one product; down with the residual add. A product that
// rows_linear_pays() turns down runs as the general path runs it (a GEMM with beta 1 into the
// residual stream, which is kept in `out`; gate, up and swiglu_fwd).
void layer_forward_rows(const LayerContext& lc, const LayerWeights& w, const Tensor& x,
                        const Tensor& pos, LayerKvCache& cache, const Tensor& row0,
                        const AttnMask& mask, const Tensor& out) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = x.dim(0);
    const DType act = be.compute_dtype();
    auto buf = [&](Shape s) { return lc.ws.take(s, act); };
    const Tensor h = buf({Sq, d.D});
    be.rmsnorm_fwd(x, w.input_ln, d.eps, h, Tensor());
    const Tensor qkv = buf({Sq, (d.H + 2 * d.Hkv) * d.Dh});
    if (rows_linear_pays(lc.rows_limits, {w.wq, w.wk, w.wv})) {
        RowsLinear proj;
        proj.w[0] = w.wq;
        proj.w[1] = w.wk;
        proj.w[2] = w.wv;
        be.rows_linear(h, proj, Tensor(), qkv);
    } else {
        const int64_t nq = d.H * d.Dh, nkv = d.Hkv * d.Dh;
        const Tensor part = buf({Sq, std::max(nq, nkv)});
        const Tensor parts[3] = {w.wq, w.wk, w.wv};
        int64_t col = 0;
        for (const Tensor& wi : parts) {
            const Tensor p =
                part.reshape({part.numel()}).rows(0, Sq * wi.dim(0)).reshape({Sq, wi.dim(0)});
            be.gemm(h, false, wi, true, p);
            be.copy_columns(qkv, col, p);
            col += wi.dim(0);
        }
    }
    const Tensor q = buf({Sq, d.H, d.Dh});
    be.qk_norm_rope_cache(qkv, w.q_norm, w.k_norm, d.eps, pos, lc.inv_freq, q, cache.k.view(),
                          cache.v.view(), row0);
    const Tensor attn = buf({Sq, d.H * d.Dh});
    be.attention_fwd(q, cache.k.view(), cache.v.view(), mask, attn.reshape({Sq, d.H, d.Dh}),
                     Tensor());
    // x1 = x + attn · Wo lives in `out` from here on (x is not read again, and out may alias
    // x, as the sessions call it): the down product then adds in place, and a product on the
    // general path needs no copy of its residual (two launches a layer fewer at 8B shapes).
    const Tensor& x1 = out;
    add_product(lc, attn, w.wo, x, x1);
    const Tensor h2 = buf({Sq, d.D});
    be.rmsnorm_fwd(x1, w.post_ln, d.eps, h2, Tensor());
    const Tensor a = buf({Sq, d.I});
    if (rows_linear_pays(lc.rows_limits, {w.w_gate, w.w_up})) {
        RowsLinear gate_up;
        gate_up.w[0] = w.w_gate;
        gate_up.w[1] = w.w_up;
        gate_up.epilogue = RowsEpilogue::swiglu;
        be.rows_linear(h2, gate_up, Tensor(), a);
    } else {
        const Tensor gate = buf({Sq, d.I}), up = buf({Sq, d.I});
        be.gemm(h2, false, w.w_gate, true, gate);
        be.gemm(h2, false, w.w_up, true, up);
        be.swiglu_fwd(gate, up, a);
    }
    add_product(lc, a, w.w_down, x1, x1);
}

}  // namespace

void layer_forward_cached(const LayerContext& lc, const LayerWeights& w, const Tensor& x,
                          const Tensor& pos, LayerKvCache& cache, const Tensor& row0,
                          const Tensor& kv_len, AttnMaskKind kind, const Tensor& out,
                          int64_t window) {
    const LayerDims& d = lc.dims;
    Backend& be = lc.be;
    const int64_t Sq = x.dim(0);
    const Workspace::Mark mark = lc.ws.mark();
    if (rows_path(lc, w, Sq)) {
        AttnMask mask = AttnMask::over_cache(kind, kv_len);
        mask.window = window;
        mask.sinks = w.sinks;
        layer_forward_rows(lc, w, x, pos, cache, row0, mask, out);
        lc.ws.release(mark);
        return;
    }
    const DType act = be.compute_dtype();
    auto buf = [&](Shape s) { return lc.ws.take(s, act); };
    auto f32 = [&](Shape s) { return lc.ws.take(s, DType::f32); };
    Tensor h = buf({Sq, d.D});
    be.rmsnorm_fwd(x, w.input_ln, d.eps, h, f32({Sq}));
    Tensor q_lin = buf({Sq, d.H * d.Dh});
    Tensor q = buf({Sq, d.H, d.Dh});
    project(lc, h, w.wq, w.bq, q_lin);
    norm_and_rope(lc, q_lin, w.q_norm, f32({Sq * d.H}), pos, q);
    if (d.q_scale != 1.0f) be.scale_inplace(q, d.q_scale);
    write_kv(lc, w, h, pos, cache, row0);
    Tensor attn = buf({Sq, d.H * d.Dh});
    AttnMask mask = AttnMask::over_cache(kind, kv_len);
    mask.window = window;
    mask.sinks = w.sinks;
    be.attention_fwd(q, cache.k.view(), cache.v.view(), mask, attn.reshape({Sq, d.H, d.Dh}),
                     Tensor());
    apply_output_gate(lc, w, h, attn);
    Tensor x1 = buf({Sq, d.D});
    be.copy(x1, x);
    project(lc, attn, w.wo, w.bo, x1, true);
    mlp_forward(lc, w, x1, f32({Sq}), buf({Sq, d.D}), buf({Sq, d.I}), buf({Sq, d.I}),
                buf({Sq, d.I}), out);
    lc.ws.release(mark);
}

}  // namespace dflash

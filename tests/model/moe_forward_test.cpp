// The forward of mixture-of-experts targets on the CPU backend: tiny Qwen3-MoE (top-k
// renormalisation on and off, a dense layer among MoE ones) and gpt-oss (sinks, attention biases,
// sliding windows shorter than the prompt, YaRN past the original context, clamped SwiGLU experts
// with biases) against a naive per-token reference written here in double precision; the cached
// session (prefill, decode, 16-token verify blocks, crop) against the full pass; YaRN's
// frequencies against the formula.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <numeric>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "model/rope_yarn.h"
#include "model/target.h"
#include "model/tiny_moe_models.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

using Vec = std::vector<double>;

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> t(n);
    for (auto& x : t) x = static_cast<int32_t>(rng.below(vocab));
    return t;
}

// YaRN as its paper and the spec state it, in double: dims below the beta_fast correction point
// keep their frequency, those above beta_slow's are divided by the factor, a linear ramp between.
Vec yarn_reference(const RopeConfig& r, int64_t dh) {
    const RopeScaling& s = r.scaling;
    auto dim_of = [&](double rot) {
        return dh * std::log(s.original_max_position / (2 * std::numbers::pi * rot)) /
               (2 * std::log(r.theta));
    };
    double lo = dim_of(s.beta_fast), hi = dim_of(s.beta_slow);
    if (s.truncate) {
        lo = std::floor(lo);
        hi = std::ceil(hi);
    }
    lo = std::max(lo, 0.0);
    hi = std::min(hi, dh - 1.0);
    Vec out(dh / 2);
    for (int64_t i = 0; i < dh / 2; ++i) {
        const double f = std::pow(r.theta, -2.0 * i / dh);
        const double ramp = std::clamp((i - lo) / (hi - lo), 0.0, 1.0);
        out[i] = f / s.factor * ramp + f * (1 - ramp);
    }
    return out;
}

Vec default_rope(const RopeConfig& r, int64_t dh) {
    Vec out(dh / 2);
    for (int64_t i = 0; i < dh / 2; ++i) out[i] = std::pow(r.theta, -2.0 * i / dh);
    return out;
}

TEST(MoeForward, YarnFrequenciesFollowTheFormula) {
    // gpt-oss-20b's rope, truncated and not.
    for (bool truncate : {false, true}) {
        RopeConfig r;
        r.theta = 150000;
        r.scaling.type = RopeScalingType::yarn;
        r.scaling.factor = 32;
        r.scaling.original_max_position = 4096;
        r.scaling.beta_fast = 32;
        r.scaling.beta_slow = 1;
        r.scaling.truncate = truncate;
        const std::vector<float> got = yarn_inv_freq(r, 64);
        const Vec want = yarn_reference(r, 64);
        ASSERT_EQ(got.size(), 32u);
        for (size_t i = 0; i < 32; ++i)
            EXPECT_NEAR(got[i], want[i], 2e-6 * want[i]) << "dim " << i << " truncate " << truncate;
        // The first dims are not scaled, the last ones fully.
        EXPECT_NEAR(got[0], 1.0, 1e-7);
        EXPECT_NEAR(got[31], std::pow(150000.0, -62.0 / 64) / 32, 1e-9);
        EXPECT_NEAR(rope_attention_factor(r.scaling), 0.1 * std::log(32.0) + 1, 1e-12);
    }
}

// ---- the naive reference ----------------------------------------------------------------------

struct Ref {
    const TargetModel& m;
    const TargetConfig& c;
    Vec get(const std::string& name) const {
        const HostTensor h = m.params().read_f32(name);
        return Vec(h.f32(), h.f32() + h.numel());
    }
};

// y[o] = sum_i W[o, i] x[i] (+ b[o]); W row-major [out, in] at `off` in w.
Vec matvec(const Vec& w, const Vec& x, int64_t out, const Vec* b = nullptr, int64_t off = 0,
           const Vec* bias_src = nullptr, int64_t bias_off = 0) {
    const auto in = static_cast<int64_t>(x.size());
    Vec y(out, 0.0);
    for (int64_t o = 0; o < out; ++o) {
        double s = 0;
        for (int64_t i = 0; i < in; ++i) s += w[off + o * in + i] * x[i];
        if (b) s += (*b)[o];
        if (bias_src) s += (*bias_src)[bias_off + o];
        y[o] = s;
    }
    return y;
}

Vec rmsnorm(const Vec& x, const Vec& w, double eps, int64_t off = 0, int64_t n = -1) {
    if (n < 0) n = static_cast<int64_t>(x.size());
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
    const double r = 1.0 / std::sqrt(ss / n + eps);
    Vec y(n);
    for (int64_t i = 0; i < n; ++i) y[i] = x[off + i] * r * w[i];
    return y;
}

double silu(double g) {
    return g / (1 + std::exp(-g));
}

// Rotate-half RoPE of one head vector at `pos`, cos and sin scaled by `af` (YaRN).
void rope(double* x, int64_t dh, int64_t pos, const Vec& inv, double af) {
    const int64_t half = dh / 2;
    for (int64_t i = 0; i < half; ++i) {
        const double a = pos * inv[i], c = std::cos(a) * af, s = std::sin(a) * af;
        const double x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c - x2 * s;
        x[i + half] = x2 * c + x1 * s;
    }
}

// The feed-forward of one token: dense SwiGLU or the experts.
Vec feed_forward(const Ref& r, const std::string& pre, bool moe, const Vec& h) {
    const TargetConfig& c = r.c;
    const int64_t D = c.hidden_size;
    Vec y(D, 0.0);
    if (!moe) {
        const int64_t I = c.intermediate_size;
        const Vec g = matvec(r.get(pre + "mlp.gate_proj.weight"), h, I);
        const Vec u = matvec(r.get(pre + "mlp.up_proj.weight"), h, I);
        Vec a(I);
        for (int64_t i = 0; i < I; ++i) a[i] = silu(g[i]) * u[i];
        return matvec(r.get(pre + "mlp.down_proj.weight"), a, D);
    }
    const int64_t E = c.num_experts, K = c.num_experts_per_tok, I = c.moe_intermediate_size;
    const bool oss = c.gpt_oss();
    Vec logits = oss ? matvec(r.get(pre + "mlp.router.weight"), h, E)
                     : matvec(r.get(pre + "mlp.gate.weight"), h, E);
    if (oss) {
        const Vec b = r.get(pre + "mlp.router.bias");
        for (int64_t e = 0; e < E; ++e) logits[e] += b[e];
    }
    // qwen3_moe ranks softmax(logits), which ranks as the logits do.
    std::vector<int64_t> order(E);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    Vec w(K);
    if (oss) {
        double z = 0;
        for (int64_t j = 0; j < K; ++j) z += std::exp(logits[order[j]] - logits[order[0]]);
        for (int64_t j = 0; j < K; ++j) w[j] = std::exp(logits[order[j]] - logits[order[0]]) / z;
    } else {
        double z = 0;
        for (int64_t e = 0; e < E; ++e) z += std::exp(logits[e] - logits[order[0]]);
        double sum = 0;
        for (int64_t j = 0; j < K; ++j) {
            w[j] = std::exp(logits[order[j]] - logits[order[0]]) / z;
            sum += w[j];
        }
        if (c.norm_topk_prob)
            for (auto& v : w) v /= sum;
    }
    const Vec gu = r.get(pre + "mlp.experts.gate_up_proj");
    const Vec dn = r.get(pre + "mlp.experts.down_proj");
    const Vec gub = oss ? r.get(pre + "mlp.experts.gate_up_proj_bias") : Vec();
    const Vec dnb = oss ? r.get(pre + "mlp.experts.down_proj_bias") : Vec();
    const double limit = c.swiglu_limit;
    for (int64_t j = 0; j < K; ++j) {
        const int64_t e = order[j];
        const Vec hu =
            matvec(gu, h, 2 * I, nullptr, e * 2 * I * D, oss ? &gub : nullptr, e * 2 * I);
        Vec a(I);
        for (int64_t i = 0; i < I; ++i) {
            double g = hu[i], u = hu[I + i];
            if (oss) {
                g = std::min(g, limit);
                u = std::clamp(u, -limit, limit);
                a[i] = (u + 1) * g / (1 + std::exp(-1.702 * g));
            } else {
                a[i] = silu(g) * u;
            }
        }
        const Vec o = matvec(dn, a, D, nullptr, e * D * I, oss ? &dnb : nullptr, e * D);
        for (int64_t d = 0; d < D; ++d) y[d] += w[j] * o[d];
    }
    return y;
}

// Logits [S][V] of the whole sequence, one token at a time through every layer.
std::vector<Vec> reference_logits(const TargetModel& m, const std::vector<int32_t>& toks) {
    const TargetConfig& c = m.config();
    const Ref r{m, c};
    const int64_t S = static_cast<int64_t>(toks.size()), D = c.hidden_size,
                  H = c.num_attention_heads, Hkv = c.num_key_value_heads, Dh = c.head_dim,
                  V = c.vocab_size;
    const Vec inv = c.rope.scaling.type == RopeScalingType::yarn ? yarn_reference(c.rope, Dh)
                                                                 : default_rope(c.rope, Dh);
    const double af = rope_attention_factor(c.rope.scaling);
    const Vec emb = r.get("model.embed_tokens.weight");
    std::vector<Vec> x(S, Vec(D));
    for (int64_t t = 0; t < S; ++t)
        for (int64_t d = 0; d < D; ++d) x[t][d] = emb[toks[t] * D + d];
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const std::string pre = fmt::format("model.layers.{}.", l);
        auto opt = [&](const std::string& n) {
            return m.params().has(pre + n) ? r.get(pre + n) : Vec();
        };
        const Vec ln1 = r.get(pre + "input_layernorm.weight");
        const Vec wq = r.get(pre + "self_attn.q_proj.weight"),
                  wk = r.get(pre + "self_attn.k_proj.weight"),
                  wv = r.get(pre + "self_attn.v_proj.weight"),
                  wo = r.get(pre + "self_attn.o_proj.weight");
        const Vec bq = opt("self_attn.q_proj.bias"), bk = opt("self_attn.k_proj.bias"),
                  bv = opt("self_attn.v_proj.bias"), bo = opt("self_attn.o_proj.bias");
        const Vec qn = opt("self_attn.q_norm.weight"), kn = opt("self_attn.k_norm.weight");
        const Vec sinks = opt("self_attn.sinks");
        std::vector<Vec> q(S), k(S), v(S);
        for (int64_t t = 0; t < S; ++t) {
            const Vec h = rmsnorm(x[t], ln1, c.rms_norm_eps);
            q[t] = matvec(wq, h, H * Dh, bq.empty() ? nullptr : &bq);
            k[t] = matvec(wk, h, Hkv * Dh, bk.empty() ? nullptr : &bk);
            v[t] = matvec(wv, h, Hkv * Dh, bv.empty() ? nullptr : &bv);
            for (int64_t hh = 0; hh < H; ++hh) {
                if (!qn.empty()) {
                    const Vec n = rmsnorm(q[t], qn, c.rms_norm_eps, hh * Dh, Dh);
                    std::copy(n.begin(), n.end(), q[t].begin() + hh * Dh);
                }
                rope(q[t].data() + hh * Dh, Dh, t, inv, af);
            }
            for (int64_t hh = 0; hh < Hkv; ++hh) {
                if (!kn.empty()) {
                    const Vec n = rmsnorm(k[t], kn, c.rms_norm_eps, hh * Dh, Dh);
                    std::copy(n.begin(), n.end(), k[t].begin() + hh * Dh);
                }
                rope(k[t].data() + hh * Dh, Dh, t, inv, af);
            }
        }
        const int64_t window = c.layer_window(l);
        for (int64_t t = 0; t < S; ++t) {
            Vec attn(H * Dh, 0.0);
            for (int64_t hh = 0; hh < H; ++hh) {
                const int64_t g = hh / (H / Hkv);
                const int64_t first = window > 0 ? std::max<int64_t>(0, t - window + 1) : 0;
                Vec s;
                double mx = sinks.empty() ? -1e300 : sinks[hh];
                for (int64_t j = first; j <= t; ++j) {
                    double dot = 0;
                    for (int64_t d = 0; d < Dh; ++d) dot += q[t][hh * Dh + d] * k[j][g * Dh + d];
                    s.push_back(dot / std::sqrt(static_cast<double>(Dh)));
                    mx = std::max(mx, s.back());
                }
                double z = sinks.empty() ? 0.0 : std::exp(sinks[hh] - mx);
                for (double& v2 : s) z += (v2 = std::exp(v2 - mx));
                for (int64_t j = first; j <= t; ++j)
                    for (int64_t d = 0; d < Dh; ++d)
                        attn[hh * Dh + d] += s[j - first] / z * v[j][g * Dh + d];
            }
            const Vec o = matvec(wo, attn, D, bo.empty() ? nullptr : &bo);
            for (int64_t d = 0; d < D; ++d) x[t][d] += o[d];
        }
        const Vec ln2 = r.get(pre + "post_attention_layernorm.weight");
        for (int64_t t = 0; t < S; ++t) {
            const Vec y =
                feed_forward(r, pre, c.is_moe_layer(l), rmsnorm(x[t], ln2, c.rms_norm_eps));
            for (int64_t d = 0; d < D; ++d) x[t][d] += y[d];
        }
    }
    const Vec norm = r.get("model.norm.weight");
    const Vec head = r.get(c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight");
    std::vector<Vec> out;
    for (int64_t t = 0; t < S; ++t)
        out.push_back(matvec(head, rmsnorm(x[t], norm, c.rms_norm_eps), V));
    return out;
}

HostTensor full_logits(Backend& be, const TargetModel& m, const std::vector<int32_t>& toks) {
    const auto S = static_cast<int64_t>(toks.size());
    Workspace ws = test::test_workspace(be);
    HostTensor h({S, m.dims().D});
    m.forward(be, ws, toks, {}, Tensor(), h);
    HostTensor logits({S, m.config().vocab_size});
    be.gemm(h, false, m.lm_head(), true, logits);
    return logits;
}

double max_rel_to_reference(const HostTensor& got, const std::vector<Vec>& want) {
    double scale = 0, err = 0;
    const int64_t V = got.dim(1);
    for (size_t t = 0; t < want.size(); ++t)
        for (int64_t v = 0; v < V; ++v) {
            scale = std::max(scale, std::fabs(want[t][v]));
            err = std::max(err, std::fabs(got.f32()[t * V + v] - want[t][v]));
        }
    return err / scale;
}

struct Case {
    const char* name;
    TargetConfig cfg;
};

std::vector<Case> cases() {
    return {{"qwen3_moe_renorm", test::tiny_qwen3_moe_config(true)},
            {"qwen3_moe_no_renorm", test::tiny_qwen3_moe_config(false)},
            {"gpt_oss", test::tiny_gpt_oss_config()}};
}

TEST(MoeForward, FullForwardEqualsTheNaiveReference) {
    auto be = make_cpu_backend(1);
    for (const Case& k : cases()) {
        const TargetModel m = TargetModel::random(*be, k.cfg, 21, 0.3f);
        // 20 tokens: past the window of 3 and the gpt-oss YaRN original context of 8.
        const auto toks = random_tokens(20, k.cfg.vocab_size, 22);
        const double err =
            max_rel_to_reference(full_logits(*be, m, toks), reference_logits(m, toks));
        EXPECT_LT(err, 2e-5) << k.name;
    }
}

TEST(MoeForward, TheReferenceSeesEveryFeature) {
    // Guards the comparison above: switching a feature off changes the reference's logits, so
    // the forward that matched it honours the feature.
    auto be = make_cpu_backend(1);
    const auto toks = random_tokens(20, 41, 23);
    const TargetModel base = TargetModel::random(*be, test::tiny_gpt_oss_config(), 24, 0.3f);
    const auto want = reference_logits(base, toks);
    auto differs = [&](TargetConfig c) {
        TargetModel m(*be, c);
        m.params().copy_from(base.params());
        const auto got = reference_logits(m, toks);
        double d = 0;
        for (size_t t = 0; t < got.size(); ++t)
            for (size_t v = 0; v < got[t].size(); ++v)
                d = std::max(d, std::fabs(got[t][v] - want[t][v]));
        return d;
    };
    TargetConfig no_window = test::tiny_gpt_oss_config();
    no_window.layer_types.assign(4, "full_attention");
    EXPECT_GT(differs(no_window), 1e-3);
    TargetConfig no_yarn = test::tiny_gpt_oss_config();
    no_yarn.rope.scaling = RopeScaling();
    EXPECT_GT(differs(no_yarn), 1e-3);
    TargetConfig k1 = test::tiny_gpt_oss_config();
    k1.num_experts_per_tok = 1;
    EXPECT_GT(differs(k1), 1e-3);
}

TEST(MoeForward, CachedPrefillDecodeAndVerifyBlocksEqualTheFullPass) {
    auto be = make_cpu_backend(1);
    for (const Case& k : cases()) {
        const TargetModel m = TargetModel::random(*be, k.cfg, 25, 0.3f);
        const int64_t V = k.cfg.vocab_size, n = 45;
        const auto toks = random_tokens(n, V, 26);
        const HostTensor ref = full_logits(*be, m, toks);
        // Prefill 7 (longer than the window), 3 decode steps, then 16-token verify blocks.
        TargetSession s(m, *be, 64, {0}, 16);
        HostTensor got({n, V});
        s.forward(std::span(toks).subspan(0, 7), got.view().rows(0, 7), Tensor());
        for (int64_t t = 7; t < 10; ++t)
            s.forward(std::span(toks).subspan(t, 1), got.view().rows(t, t + 1), Tensor());
        s.forward(std::span(toks).subspan(10, 16), got.view().rows(10, 26), Tensor());
        // A rejected block: fed, then cropped away, then the real one.
        const auto wrong = random_tokens(16, V, 27);
        s.forward(wrong, Tensor(), Tensor());
        s.crop(26);
        s.forward(std::span(toks).subspan(26, 16), got.view().rows(26, 42), Tensor());
        s.forward(std::span(toks).subspan(42, 3), got.view().rows(42, 45), Tensor());
        EXPECT_EQ(s.length(), n);
        EXPECT_LT(test::max_rel_diff(got, ref), 1e-5) << k.name;
    }
}

TEST(MoeForward, PretrainingAnMoeTargetIsRefused) {
    auto be = make_cpu_backend(1);
    TargetModel m = TargetModel::random(*be, test::tiny_qwen3_moe_config(), 28, 0.2f);
    const auto toks = random_tokens(6, 37, 29);
    const std::vector<uint8_t> mask(6, 1);
    const std::string err = test::error_of([&] { test::target_step(*be, m, toks, mask, 1.0f, 5); });
    EXPECT_NE(err.find("not supported"), std::string::npos) << err;
}

}  // namespace
}  // namespace dflash

// Gated DeltaNet, the fp32 reference (semantics in backend/op_list.h, "Gated DeltaNet"): the
// short conv and its cache roll, the recurrence's inputs, the gated delta rule token by token
// (gdn_recurrent) and in chunks (gdn_chunked), and the gated output norm. Forward only: the target
// is frozen while a drafter trains, so there is no backward to check against finite differences.
// Tested by tests/ops/gdn_test.cpp.
//
// Note [gdn chunked reference]: gdn_chunked is an independent derivation, not the recurrence in a
// loop, so the two check each other. Within a chunk of L <= 64 tokens entering with state S, let
// G_i = g_1 + ... + g_i and u_i = beta_i (v_i - S_{i-1}^T k_i exp(g_i)) the update written into the
// state at token i (S_i = exp(g_i) S_{i-1} + k_i u_i^T). Unrolling the recurrence,
//   S_i = exp(G_i) S + sum_{j <= i} exp(G_i - G_j) k_j u_j^T,
// so u_i + sum_{j < i} A_ij u_j = beta_i v_i - beta_i exp(G_i) S^T k_i with the strictly lower
// A_ij = beta_i (k_i . k_j) exp(G_i - G_j). With T = (I + A)^-1 (unit lower triangular, by forward
// substitution), W = T (beta exp(G) K) and U = T (beta V): the updates are U - W S, and
//   o_i = exp(G_i) S^T q_i + sum_{j <= i} (q_i . k_j) exp(G_i - G_j) u_j,
//   S_next = exp(G_L) S + sum_j exp(G_L - G_j) k_j u_j^T.
// Every exponent is <= 0 (g <= 0 and i >= j), so nothing overflows however long the chunk.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"
#include "core/error.h"

namespace dflash::cpu {
namespace {

constexpr int64_t kChunk = 64;  // tokens per chunk of gdn_chunked (the layer's own chunking)

float sigmoid(float v) {
    return 1.0f / (1.0f + std::exp(-v));
}

float silu(float v) {
    return v * sigmoid(v);
}

// torch's softplus (beta 1, threshold 20): the identity above 20, where log1p(exp(x)) == x in f32.
float softplus(float v) {
    return v > 20.0f ? v : std::log1p(std::exp(v));
}

// The number of tokens gdn_recurrent / gdn_conv_advance apply: count[0] clamped to [0, S]; all S
// when count is empty.
int64_t applied_tokens(const Tensor& count, int64_t S) {
    if (count.empty()) return S;
    DF_CHECK(count.device().kind == DeviceKind::cpu, "gdn: count is {}, expected a CPU tensor",
             count.describe());
    return std::clamp<int64_t>(count.i32()[0], 0, S);
}

// The gated delta rule's tensors, as raw pointers with the strides of one head.
struct Rule {
    const float *q, *k, *v, *g, *beta;
    float* o;  // null: outputs not wanted
    GdnDims d;
    const float* qk_row(const float* base, int64_t t,
                        int64_t h) const {  // key head of value head h
        return base + (t * d.Hk + h / d.ratio()) * d.dk;
    }
};

// One value head h through tokens [0, n), state s [dk, dv] in place.
void recurrent_head(const Rule& r, int64_t h, int64_t n, float* s) {
    const int64_t dk = r.d.dk, dv = r.d.dv, Hv = r.d.Hv;
    std::vector<float> e(static_cast<size_t>(dv));
    for (int64_t t = 0; t < n; ++t) {
        const float* q = r.qk_row(r.q, t, h);
        const float* k = r.qk_row(r.k, t, h);
        const float* v = r.v + (t * Hv + h) * dv;
        const float decay = std::exp(r.g[t * Hv + h]);
        const float beta = r.beta[t * Hv + h];
        for (int64_t i = 0; i < dk * dv; ++i) s[i] *= decay;
        // e = beta * (v - S^T k)
        for (int64_t c = 0; c < dv; ++c) e[static_cast<size_t>(c)] = 0.0f;
        for (int64_t i = 0; i < dk; ++i)
            for (int64_t c = 0; c < dv; ++c) e[static_cast<size_t>(c)] += s[i * dv + c] * k[i];
        for (int64_t c = 0; c < dv; ++c)
            e[static_cast<size_t>(c)] = beta * (v[c] - e[static_cast<size_t>(c)]);
        for (int64_t i = 0; i < dk; ++i)
            for (int64_t c = 0; c < dv; ++c) s[i * dv + c] += k[i] * e[static_cast<size_t>(c)];
        if (r.o == nullptr) continue;
        float* o = r.o + (t * Hv + h) * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] = 0.0f;
        for (int64_t i = 0; i < dk; ++i)
            for (int64_t c = 0; c < dv; ++c) o[c] += s[i * dv + c] * q[i];
    }
}

// One value head h through all S tokens in chunks (Note [gdn chunked reference]).
void chunked_head(const Rule& r, int64_t h, float* s) {
    const int64_t dk = r.d.dk, dv = r.d.dv, Hv = r.d.Hv, S = r.d.S;
    const auto at = [](std::vector<float>& m, int64_t i) -> float& {
        return m[static_cast<size_t>(i)];
    };
    std::vector<float> G(kChunk), A(kChunk * kChunk), T(kChunk * kChunk), W(kChunk * dk),
        U(kChunk * dv), kb(kChunk * dk), vb(kChunk * dv), next(dk * dv);
    for (int64_t t0 = 0; t0 < S; t0 += kChunk) {
        const int64_t L = std::min(kChunk, S - t0);
        const auto key = [&](int64_t i) { return r.qk_row(r.k, t0 + i, h); };
        const auto query = [&](int64_t i) { return r.qk_row(r.q, t0 + i, h); };
        float cum = 0.0f;
        for (int64_t i = 0; i < L; ++i) at(G, i) = cum += r.g[(t0 + i) * Hv + h];
        // A (strictly lower) and the right-hand sides beta exp(G) K and beta V.
        for (int64_t i = 0; i < L; ++i) {
            const float beta = r.beta[(t0 + i) * Hv + h];
            for (int64_t j = 0; j < i; ++j) {
                float dot = 0.0f;
                for (int64_t c = 0; c < dk; ++c) dot += key(i)[c] * key(j)[c];
                at(A, i * kChunk + j) = beta * dot * std::exp(at(G, i) - at(G, j));
            }
            const float kscale = beta * std::exp(at(G, i));
            for (int64_t c = 0; c < dk; ++c) at(kb, i * dk + c) = kscale * key(i)[c];
            const float* v = r.v + ((t0 + i) * Hv + h) * dv;
            for (int64_t c = 0; c < dv; ++c) at(vb, i * dv + c) = beta * v[c];
        }
        // T = (I + A)^-1 row by row: T_i = e_i - sum_{j < i} A_ij T_j (T_j is zero past column j).
        for (int64_t i = 0; i < L; ++i) {
            float* ti = &at(T, i * kChunk);
            std::fill_n(ti, L, 0.0f);
            ti[i] = 1.0f;
            for (int64_t j = 0; j < i; ++j) {
                const float aij = at(A, i * kChunk + j);
                const float* tj = &at(T, j * kChunk);
                for (int64_t c = 0; c <= j; ++c) ti[c] -= aij * tj[c];
            }
        }
        // W = T kb, U = T vb; then the updates U <- U - W S.
        for (int64_t i = 0; i < L; ++i) {
            float* w = &at(W, i * dk);
            float* u = &at(U, i * dv);
            std::fill_n(w, dk, 0.0f);
            std::fill_n(u, dv, 0.0f);
            for (int64_t j = 0; j <= i; ++j) {
                const float tij = at(T, i * kChunk + j);
                for (int64_t c = 0; c < dk; ++c) w[c] += tij * at(kb, j * dk + c);
                for (int64_t c = 0; c < dv; ++c) u[c] += tij * at(vb, j * dv + c);
            }
            for (int64_t c = 0; c < dk; ++c)
                for (int64_t e = 0; e < dv; ++e) u[e] -= w[c] * s[c * dv + e];
        }
        // Outputs, from the entering state and the chunk's own updates.
        if (r.o != nullptr) {
            for (int64_t i = 0; i < L; ++i) {
                float* o = r.o + ((t0 + i) * Hv + h) * dv;
                const float* q = query(i);
                const float qscale = std::exp(at(G, i));
                std::fill_n(o, dv, 0.0f);
                for (int64_t c = 0; c < dk; ++c)
                    for (int64_t e = 0; e < dv; ++e) o[e] += qscale * q[c] * s[c * dv + e];
                for (int64_t j = 0; j <= i; ++j) {
                    float dot = 0.0f;
                    for (int64_t c = 0; c < dk; ++c) dot += q[c] * key(j)[c];
                    const float coef = dot * std::exp(at(G, i) - at(G, j));
                    for (int64_t e = 0; e < dv; ++e) o[e] += coef * at(U, j * dv + e);
                }
            }
        }
        // S <- exp(G_L) S + sum_j exp(G_L - G_j) k_j u_j^T.
        const float carry = std::exp(at(G, L - 1));
        for (int64_t i = 0; i < dk * dv; ++i) at(next, i) = carry * s[i];
        for (int64_t j = 0; j < L; ++j) {
            const float decay = std::exp(at(G, L - 1) - at(G, j));
            for (int64_t c = 0; c < dk; ++c) {
                const float kc = decay * key(j)[c];
                for (int64_t e = 0; e < dv; ++e) at(next, c * dv + e) += kc * at(U, j * dv + e);
            }
        }
        std::copy_n(next.data(), dk * dv, s);
    }
}

Rule make_rule(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
               const Tensor& beta, const Tensor& o, const GdnDims& d) {
    return Rule{q.f32(), k.f32(), v.f32(), g.f32(), beta.f32(), o.empty() ? nullptr : o.f32(), d};
}

void check_rule_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                       const Tensor& beta, const Tensor& state, const Tensor& o, const char* op) {
    check_cpu_f32(q, op, "q");
    check_cpu_f32(k, op, "k");
    check_cpu_f32(v, op, "v");
    check_cpu_f32(g, op, "g");
    check_cpu_f32(beta, op, "beta");
    check_cpu_f32(state, op, "state");
    if (!o.empty()) check_cpu_f32(o, op, "o");
}

}  // namespace

void gdn_conv(const Exec& ex, const Tensor& x, const Tensor& w, const Tensor& state,
              const Tensor& y) {
    constexpr const char* op = "gdn_conv";
    check_cpu_f32(x, op, "x");
    check_cpu_f32(w, op, "w");
    check_cpu_f32(state, op, "state");
    check_cpu_f32(y, op, "y");
    const GdnConvDims d = check_gdn_conv_shapes(x, w, state, y);
    const int64_t C = d.C, K = d.K;
    // u[t] for t in [-(K-1), S): the state's rows, then x's.
    const auto u = [&](int64_t t, int64_t c) {
        return t < 0 ? state.f32()[(t + K - 1) * C + c] : x.f32()[t * C + c];
    };
    parallel_for(ex, d.S, d.S * C * K > 65536, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t)
            for (int64_t c = 0; c < C; ++c) {
                float acc = 0.0f;
                for (int64_t j = 0; j < K; ++j) acc += w.f32()[c * K + j] * u(t - K + 1 + j, c);
                y.f32()[t * C + c] = silu(acc);
            }
    });
}

void gdn_conv_advance(const Exec& /*ex*/, const Tensor& state, const Tensor& x,
                      const Tensor& count) {
    constexpr const char* op = "gdn_conv_advance";
    check_cpu_f32(state, op, "state");
    check_cpu_f32(x, op, "x");
    const GdnConvDims d = check_gdn_conv_advance_shapes(state, x, count);
    const int64_t n = applied_tokens(count, d.S), C = d.C, keep = d.K - 1;
    // The window [state ; x[0, n)] ends at row keep + n; its last `keep` rows start at row n.
    std::vector<float> next(static_cast<size_t>(keep * C));
    for (int64_t r = 0; r < keep; ++r) {
        const int64_t src = n + r;  // row of [state ; x]
        const float* from = src < keep ? state.f32() + src * C : x.f32() + (src - keep) * C;
        std::copy_n(from, C, next.data() + r * C);
    }
    std::copy(next.begin(), next.end(), state.f32());
}

void gdn_prepare(const Exec& ex, const Tensor& conv_out, const Tensor& b, const Tensor& a,
                 const Tensor& a_log, const Tensor& dt_bias, const Tensor& q, const Tensor& k,
                 const Tensor& v, const Tensor& g, const Tensor& beta) {
    constexpr const char* op = "gdn_prepare";
    check_cpu_f32(conv_out, op, "conv_out");
    check_cpu_f32(b, op, "b");
    check_cpu_f32(a, op, "a");
    check_cpu_f32(a_log, op, "a_log");
    check_cpu_f32(dt_bias, op, "dt_bias");
    check_cpu_f32(q, op, "q");
    check_cpu_f32(k, op, "k");
    check_cpu_f32(v, op, "v");
    check_cpu_f32(g, op, "g");
    check_cpu_f32(beta, op, "beta");
    const GdnDims d = check_gdn_prepare_shapes(conv_out, b, a, a_log, dt_bias, q, k, v, g, beta);
    const int64_t C = 2 * d.Hk * d.dk + d.Hv * d.dv, key_width = d.Hk * d.dk;
    const float qscale = 1.0f / std::sqrt(static_cast<float>(d.dk));
    // dst = src * rsqrt(sum src^2 + 1e-6) * scale over one head of dk.
    const auto l2norm = [&](const float* src, float* dst, float scale) {
        float ss = 0.0f;
        for (int64_t c = 0; c < d.dk; ++c) ss += src[c] * src[c];
        const float inv = 1.0f / std::sqrt(ss + 1e-6f);
        for (int64_t c = 0; c < d.dk; ++c) dst[c] = src[c] * inv * scale;
    };
    parallel_for(ex, d.S, d.S * C > 65536, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* row = conv_out.f32() + t * C;
            for (int64_t h = 0; h < d.Hk; ++h) {
                // q is normalised first, then scaled (HF: l2norm, then times dk^-0.5).
                l2norm(row + h * d.dk, q.f32() + (t * d.Hk + h) * d.dk, 1.0f);
                float* qh = q.f32() + (t * d.Hk + h) * d.dk;
                for (int64_t c = 0; c < d.dk; ++c) qh[c] *= qscale;
                l2norm(row + key_width + h * d.dk, k.f32() + (t * d.Hk + h) * d.dk, 1.0f);
            }
            std::copy_n(row + 2 * key_width, d.Hv * d.dv, v.f32() + t * d.Hv * d.dv);
            for (int64_t h = 0; h < d.Hv; ++h) {
                const int64_t i = t * d.Hv + h;
                g.f32()[i] = -std::exp(a_log.f32()[h]) * softplus(a.f32()[i] + dt_bias.f32()[h]);
                beta.f32()[i] = sigmoid(b.f32()[i]);
            }
        }
    });
}

void gdn_chunked(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                 const Tensor& beta, const Tensor& state, const Tensor& o) {
    constexpr const char* op = "gdn_chunked";
    check_rule_inputs(q, k, v, g, beta, state, o, op);
    const GdnDims d = check_gdn_rule_shapes(q, k, v, g, beta, state, o, Tensor{}, false, op);
    const Rule r = make_rule(q, k, v, g, beta, o, d);
    // Heads are independent: each part owns its heads' state and output columns.
    parallel_for(ex, d.Hv, d.S * d.dk * d.dv > 16384, [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h) chunked_head(r, h, state.f32() + h * d.dk * d.dv);
    });
}

void gdn_recurrent(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& g, const Tensor& beta, const Tensor& state, const Tensor& o,
                   const Tensor& count) {
    constexpr const char* op = "gdn_recurrent";
    check_rule_inputs(q, k, v, g, beta, state, o, op);
    const GdnDims d = check_gdn_rule_shapes(q, k, v, g, beta, state, o, count, true, op);
    const int64_t n = applied_tokens(count, d.S);
    const Rule r = make_rule(q, k, v, g, beta, o, d);
    parallel_for(ex, d.Hv, n * d.dk * d.dv > 16384, [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h) recurrent_head(r, h, n, state.f32() + h * d.dk * d.dv);
    });
}

void gdn_gated_norm(const Exec& ex, const Tensor& o, const Tensor& z, const Tensor& w, float eps,
                    const Tensor& y) {
    constexpr const char* op = "gdn_gated_norm";
    check_cpu_f32(o, op, "o");
    check_cpu_f32(z, op, "z");
    check_cpu_f32(w, op, "w");
    check_cpu_f32(y, op, "y");
    const GdnDims d = check_gdn_gated_norm_shapes(o, z, w, eps, y);
    const int64_t rows = d.S * d.Hv, dv = d.dv;
    parallel_for(ex, rows, rows * dv > 65536, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const float* x = o.f32() + r * dv;
            float ss = 0.0f;
            for (int64_t c = 0; c < dv; ++c) ss += x[c] * x[c];
            const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dv) + eps);
            for (int64_t c = 0; c < dv; ++c)
                y.f32()[r * dv + c] = x[c] * inv * w.f32()[c] * silu(z.f32()[r * dv + c]);
        }
    });
}

}  // namespace dflash::cpu

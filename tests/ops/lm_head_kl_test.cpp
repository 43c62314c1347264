// cpu::lm_head_kl against a naive double-precision reference that materialises the full [R, V]
// logits and both distributions and applies each loss's definition (KL(p || q), KL(q || p), JSD,
// TV) and the softmax chain rule, a hand-computed two-token case (no torch here to cross-check
// against), central finite differences of the reference loss for dh and dw for every kind, a mix
// equal to the weighted sum of its parts, and the properties training relies on: every divergence
// >= 0, exactly 0 loss and gradient when the draft equals the teacher, chunk-size independence.
// Sizes are awkward on purpose: rows 1 and 7, V not a multiple of the chunk, chunk 1. Tolerances
// as tests/ops/lm_head_ce_test.cpp: fp32 op vs double reference 1e-5 relative to max(1, |ref|);
// FD 1e-4.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::max_rel_diff;
using test::random_tensor;
using test::to_double;

struct Problem {
    HostTensor h;        // [R, D] draft hidden states
    HostTensor t;        // [R, D] teacher hidden states
    HostTensor w;        // [V, D]
    HostTensor weights;  // [R]
    float grad_scale = 1.0f;
    LmHeadDivergences div;  // forward KL unless a test says otherwise
};

// Each kind alone, and a mix of all four.
struct Kind {
    const char* name;
    LmHeadDivergences div;
};
const Kind kKinds[] = {
    {"kl", {1.0f, 0.0f, 0.0f, 0.0f}},  {"rkl", {0.0f, 1.0f, 0.0f, 0.0f}},
    {"jsd", {0.0f, 0.0f, 1.0f, 0.0f}}, {"tv", {0.0f, 0.0f, 0.0f, 1.0f}},
    {"mix", {0.3f, 0.5f, 0.7f, 1.1f}},
};

// Every third row has weight 0.
Problem make_problem(int64_t r, int64_t d, int64_t v, uint64_t seed) {
    Rng rng(seed);
    Problem p{random_tensor({r, d}, rng),
              random_tensor({r, d}, rng),
              random_tensor({v, d}, rng, 0.7f),
              HostTensor({r}),
              0.37f,
              {}};
    for (int64_t i = 0; i < r; ++i) p.weights.f32()[i] = i % 3 == 2 ? 0.0f : 0.25f + rng.uniform();
    return p;
}

struct Ref {
    std::vector<double> loss_rows;  // [R]
    std::vector<int32_t> argmax;    // [R]
    std::vector<double> dh;         // [R, D]
    std::vector<double> dw;         // [V, D]
    double loss = 0;                // grad_scale * sum_r weight_r * loss_r
};

// One row's loss straight from the definitions, on full log-distributions lq (draft), lp
// (teacher); with dq non-null, also d loss / d q_v (q and p taken as free variables).
double row_loss(const LmHeadDivergences& div, const std::vector<double>& lq,
                const std::vector<double>& lp, std::vector<double>* dq) {
    const size_t v = lq.size();
    double loss = 0;
    if (dq) dq->assign(v, 0.0);
    for (size_t c = 0; c < v; ++c) {
        const double q = std::exp(lq[c]), p = std::exp(lp[c]);
        const double lm = std::log(0.5 * (p + q));
        loss += div.kl * p * (lp[c] - lq[c]);
        loss += div.rkl * q * (lq[c] - lp[c]);
        loss += div.jsd * 0.5 * (p * (lp[c] - lm) + q * (lq[c] - lm));
        loss += div.tv * 0.5 * std::fabs(p - q);
        if (dq) {
            // d/dq of: -p log q; q (log q - log p); (p log(p/m) + q log(q/m)) / 2; |p - q| / 2.
            (*dq)[c] = div.kl * -p / q + div.rkl * (lq[c] - lp[c] + 1.0) +
                       div.jsd * 0.5 * (lq[c] - lm) + div.tv * 0.5 * (q > p ? 1.0 : -1.0);
        }
    }
    return loss;
}

std::vector<double> log_softmax(const std::vector<double>& x, const std::vector<double>& w,
                                int64_t i, int64_t d, int64_t v, std::vector<double>& logits) {
    double m = -INFINITY;
    for (int64_t c = 0; c < v; ++c) {
        double z = 0;
        for (int64_t k = 0; k < d; ++k) z += x[i * d + k] * w[c * d + k];
        logits[c] = z;
        m = std::max(m, z);
    }
    double sum = 0;
    for (int64_t c = 0; c < v; ++c) sum += std::exp(logits[c] - m);
    std::vector<double> out(v);
    for (int64_t c = 0; c < v; ++c) out[c] = logits[c] - m - std::log(sum);
    return out;
}

Ref reference(const std::vector<double>& h, const std::vector<double>& t,
              const std::vector<double>& w, const Problem& p) {
    const int64_t r = p.h.dim(0), d = p.h.dim(1), v = p.w.dim(0);
    Ref ref{std::vector<double>(r), std::vector<int32_t>(r), std::vector<double>(r * d, 0.0),
            std::vector<double>(v * d, 0.0)};
    std::vector<double> dl(v), tl(v);
    for (int64_t i = 0; i < r; ++i) {
        const std::vector<double> lq = log_softmax(h, w, i, d, v, dl);
        const std::vector<double> lp = log_softmax(t, w, i, d, v, tl);
        for (int64_t c = 0; c < v; ++c)
            if (dl[c] > dl[ref.argmax[i]]) ref.argmax[i] = static_cast<int32_t>(c);
        const double wt = p.weights.f32()[i];
        if (wt == 0) continue;
        std::vector<double> dq;
        ref.loss_rows[i] = row_loss(p.div, lq, lp, &dq);
        ref.loss += p.grad_scale * wt * ref.loss_rows[i];
        // Through the softmax: d/dd_c = q_c (dq_c - sum_v q_v dq_v).
        double mean = 0;
        for (int64_t c = 0; c < v; ++c) mean += std::exp(lq[c]) * dq[c];
        for (int64_t c = 0; c < v; ++c) {
            const double g = p.grad_scale * wt * std::exp(lq[c]) * (dq[c] - mean);
            for (int64_t k = 0; k < d; ++k) {
                ref.dh[i * d + k] += g * w[c * d + k];
                ref.dw[c * d + k] += g * h[i * d + k];
            }
        }
    }
    return ref;
}

struct Result {
    HostTensor loss_rows, argmax, dh, dw;
};

Result run(const Problem& p, int64_t chunk, int threads = 1) {
    const int64_t r = p.h.dim(0);
    Result res{HostTensor({r}), HostTensor({r}, DType::i32), HostTensor(p.h.shape()),
               HostTensor(p.w.shape())};
    fill_f32(res.dh, 5.0f);  // overwritten
    cpu::lm_head_kl(cpu::PooledExec{threads}, p.h, p.t, p.w, p.weights, p.grad_scale, chunk, p.div,
                    {res.loss_rows, res.argmax, res.dh, res.dw, Tensor()});
    return res;
}

TEST(LmHeadKl, EveryKindMatchesFullLogitsReference) {
    uint64_t seed = 1;
    for (const Kind& kind : kKinds) {
        for (int64_t v : {1, 17, 1000}) {
            for (int64_t chunk : {int64_t{1}, int64_t{7}, v, v + 13}) {
                if (chunk == 1 && v == 1000) continue;  // 1000 GEMMs of one column: slow, no news
                for (int64_t r : {1, 7, 13}) {
                    SCOPED_TRACE(fmt::format("{} V={} chunk={} R={}", kind.name, v, chunk, r));
                    Problem p = make_problem(r, 6, v, seed++);
                    p.div = kind.div;
                    const Result got = run(p, chunk, r % 2 == 0 ? 1 : 3);
                    const Ref ref = reference(to_double(p.h), to_double(p.t), to_double(p.w), p);
                    EXPECT_LT(max_rel_diff(got.loss_rows.f32(), ref.loss_rows), 1e-5);
                    EXPECT_LT(max_rel_diff(got.dh.f32(), ref.dh), 1e-5);
                    EXPECT_LT(max_rel_diff(got.dw.f32(), ref.dw), 1e-5);
                    for (int64_t i = 0; i < r; ++i) {
                        EXPECT_EQ(got.argmax.i32()[i], ref.argmax[i]) << "row " << i;
                        EXPECT_GE(got.loss_rows.f32()[i], -1e-6f) << "row " << i;
                    }
                }
            }
        }
    }
}

// V = 2, D = 1, w = [[1], [0]]: draft logits [ln 2, 0] (q = [2/3, 1/3]), teacher logits [0, 0]
// (p = [1/2, 1/2]).
Problem two_tokens() {
    Problem p{
        HostTensor({1, 1}), HostTensor({1, 1}), HostTensor({2, 1}), HostTensor({1}), 1.0f, {}};
    p.h.f32()[0] = std::log(2.0f);
    p.t.f32()[0] = 0.0f;
    p.w.f32()[0] = 1.0f;
    p.w.f32()[1] = 0.0f;
    p.weights.f32()[0] = 1.0f;
    return p;
}

// KL = 1/2 ln(3/4) + 1/2 ln(3/2) = 1/2 ln(9/8); q - p = [1/6, -1/6], so dh = 1/6 * 1 +
// (-1/6) * 0 = 1/6 and dw = (q - p) * h = [ln 2 / 6, -ln 2 / 6].
TEST(LmHeadKl, HandComputedTwoTokenCase) {
    const Problem p = two_tokens();
    for (int64_t chunk : {1, 2}) {
        const Result got = run(p, chunk);
        EXPECT_NEAR(got.loss_rows.f32()[0], 0.5 * std::log(9.0 / 8.0), 1e-7);
        EXPECT_NEAR(got.dh.f32()[0], 1.0 / 6.0, 1e-7);
        EXPECT_NEAR(got.dw.f32()[0], std::log(2.0) / 6.0, 1e-7);
        EXPECT_NEAR(got.dw.f32()[1], -std::log(2.0) / 6.0, 1e-7);
        EXPECT_EQ(got.argmax.i32()[0], 0);
    }
}

// The same two tokens for TV and L1's gradient: q - p = [1/6, -1/6], so TV = 1/6; u (the draft's
// mass where q > p) = 2/3 and the gradient q (1[q > p] - u) = [2/3 * 1/3, 1/3 * -2/3] = [2/9,
// -2/9].
TEST(LmHeadKl, HandComputedTwoTokenTv) {
    Problem p = two_tokens();
    p.div = {0.0f, 0.0f, 0.0f, 1.0f};
    for (int64_t chunk : {1, 2}) {
        const Result got = run(p, chunk);
        EXPECT_NEAR(got.loss_rows.f32()[0], 1.0 / 6.0, 1e-7);
        EXPECT_NEAR(got.dh.f32()[0], 2.0 / 9.0, 1e-7);
        EXPECT_NEAR(got.dw.f32()[0], std::log(2.0) * 2.0 / 9.0, 1e-7);
        EXPECT_NEAR(got.dw.f32()[1], -std::log(2.0) * 2.0 / 9.0, 1e-7);
    }
}

TEST(LmHeadKl, DraftEqualToTeacherGivesExactlyZero) {
    for (const Kind& kind : kKinds) {
        SCOPED_TRACE(kind.name);
        Problem p = make_problem(8, 6, 300, 3);
        p.h = p.t.clone();
        p.div = kind.div;
        for (int64_t chunk : {7, 300}) {
            const Result got = run(p, chunk, 2);
            for (int64_t i = 0; i < p.h.numel(); ++i) EXPECT_EQ(got.dh.f32()[i], 0.0f) << i;
            for (int64_t i = 0; i < p.w.numel(); ++i) EXPECT_EQ(got.dw.f32()[i], 0.0f) << i;
            for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(got.loss_rows.f32()[i], 0.0f) << i;
        }
    }
}

TEST(LmHeadKl, ChunkSizeDoesNotChangeResults) {
    for (const Kind& kind : kKinds) {
        Problem p = make_problem(9, 10, 300, 5);
        p.div = kind.div;
        const Result whole = run(p, 300);
        for (int64_t chunk : {1, 3, 7, 64, 299, 1000}) {
            SCOPED_TRACE(fmt::format("{} chunk={}", kind.name, chunk));
            const Result got = run(p, chunk, chunk % 2 == 0 ? 3 : 1);
            EXPECT_LT(test::max_abs_diff(got.loss_rows, whole.loss_rows), 1e-6);
            EXPECT_LT(test::max_rel_diff(got.dh, whole.dh), 1e-6);
            EXPECT_LT(test::max_rel_diff(got.dw, whole.dw), 1e-6);
            for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(got.argmax.i32()[i], whole.argmax.i32()[i]);
        }
    }
}

// The mix's loss rows and gradients are the weighted sums of the single kinds'.
TEST(LmHeadKl, MixEqualsWeightedSumOfItsParts) {
    Problem p = make_problem(7, 5, 61, 41);
    p.div = kKinds[4].div;
    const Result mix = run(p, 16, 2);
    const float weights[] = {p.div.kl, p.div.rkl, p.div.jsd, p.div.tv};
    std::vector<double> loss(7, 0.0), dh(p.h.numel(), 0.0), dw(p.w.numel(), 0.0);
    for (int k = 0; k < 4; ++k) {
        p.div = kKinds[k].div;
        const Result part = run(p, 16, 2);
        for (int64_t i = 0; i < 7; ++i) loss[i] += weights[k] * part.loss_rows.f32()[i];
        for (int64_t i = 0; i < p.h.numel(); ++i) dh[i] += weights[k] * part.dh.f32()[i];
        for (int64_t i = 0; i < p.w.numel(); ++i) dw[i] += weights[k] * part.dw.f32()[i];
    }
    EXPECT_LT(max_rel_diff(mix.loss_rows.f32(), loss), 1e-6);
    EXPECT_LT(max_rel_diff(mix.dh.f32(), dh), 1e-6);
    EXPECT_LT(max_rel_diff(mix.dw.f32(), dw), 1e-6);
}

// 4-point central differences (support/finite_diff.h) of the double reference loss with respect
// to h (or w). The teacher is a constant: moving w moves only the draft side.
std::vector<double> finite_diff(const Problem& p, bool wrt_h) {
    const std::vector<double> h = to_double(p.h), t = to_double(p.t), w = to_double(p.w);
    const int64_t r = p.h.dim(0), d = p.h.dim(1), v = p.w.dim(0);
    std::vector<std::vector<double>> lp_rows(static_cast<size_t>(r));
    std::vector<double> tl(v);
    for (int64_t i = 0; i < r; ++i) lp_rows[i] = log_softmax(t, w, i, d, v, tl);
    const auto loss = [&](const std::vector<double>& x) {
        const std::vector<double>& hh = wrt_h ? x : h;
        const std::vector<double>& ww = wrt_h ? w : x;
        std::vector<double> dl(v);
        double total = 0;
        for (int64_t i = 0; i < r; ++i) {
            if (p.weights.f32()[i] == 0.0f) continue;
            const std::vector<double> lq = log_softmax(hh, ww, i, d, v, dl);
            total += p.grad_scale * p.weights.f32()[i] * row_loss(p.div, lq, lp_rows[i], nullptr);
        }
        return total;
    };
    return test::fd_gradient(loss, wrt_h ? h : w, 1e-4);
}

TEST(LmHeadKl, GradientsOfEveryKindMatchFiniteDifferences) {
    for (const Kind& kind : kKinds) {
        for (int64_t chunk : {4, 23}) {
            SCOPED_TRACE(fmt::format("{} chunk={}", kind.name, chunk));
            Problem p = make_problem(7, 5, 23, 17);
            p.div = kind.div;
            const Result got = run(p, chunk);
            EXPECT_LT(max_rel_diff(got.dh.f32(), finite_diff(p, true)), 1e-4);
            EXPECT_LT(max_rel_diff(got.dw.f32(), finite_diff(p, false)), 1e-4);
        }
    }
}

TEST(LmHeadKl, DwAccumulatesAndOutputsAreOptional) {
    const Problem p = make_problem(6, 5, 40, 21);
    const Result once = run(p, 9);
    HostTensor dw(p.w.shape());
    fill_f32(dw, 1.5f);
    cpu::lm_head_kl(cpu::PooledExec{2}, p.h, p.t, p.w, p.weights, p.grad_scale, 9, p.div,
                    {Tensor(), Tensor(), Tensor(), dw, Tensor()});
    for (int64_t i = 0; i < dw.numel(); ++i)
        EXPECT_NEAR(dw.f32()[i], 1.5f + once.dw.f32()[i], 1e-6) << i;
    HostTensor loss({6});
    cpu::lm_head_kl(cpu::PooledExec{1}, p.h, p.t, p.w, p.weights, p.grad_scale, 9, p.div,
                    {loss, Tensor(), Tensor(), Tensor(), Tensor()});
    EXPECT_EQ(test::max_abs_diff(loss, once.loss_rows), 0.0);
}

TEST(LmHeadKl, TeacherOfAnotherShapeIsAnError) {
    Problem p = make_problem(4, 3, 10, 31);
    p.t = HostTensor({3, 3});
    try {
        run(p, 4);
        FAIL() << "expected an error for a teacher of 3 rows";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("teacher"), std::string::npos) << e.what();
    }
}

TEST(LmHeadKl, BadDivergenceWeightsAreAnError) {
    Problem p = make_problem(4, 3, 10, 33);
    for (const LmHeadDivergences& div :
         {LmHeadDivergences{0.0f, 0.0f, 0.0f, 0.0f}, LmHeadDivergences{1.0f, -0.5f, 0.0f, 0.0f},
          LmHeadDivergences{1.0f, 0.0f, NAN, 0.0f}}) {
        p.div = div;
        try {
            run(p, 4);
            FAIL() << "expected an error for weights " << div.kl << " " << div.rkl << " " << div.jsd
                   << " " << div.tv;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("divergence weights"), std::string::npos)
                << e.what();
        }
    }
}

}  // namespace
}  // namespace dflash

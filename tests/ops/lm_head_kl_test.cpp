// cpu::lm_head_kl against a naive double-precision reference that materialises the full [R, V]
// logits of both sides, a hand-computed two-token case (no torch here to cross-check against),
// central finite differences of the reference loss for dh and dw, and the properties training
// relies on: KL >= 0, exactly 0 loss and gradient when the draft equals the teacher, chunk-size
// independence. Tolerances as tests/ops/lm_head_ce_test.cpp: fp32 op vs double reference 1e-5
// relative to max(1, |ref|); FD 1e-4.
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
};

// Every third row has weight 0.
Problem make_problem(int64_t r, int64_t d, int64_t v, uint64_t seed) {
    Rng rng(seed);
    Problem p{random_tensor({r, d}, rng), random_tensor({r, d}, rng),
              random_tensor({v, d}, rng, 0.7f), HostTensor({r}), 0.37f};
    for (int64_t i = 0; i < r; ++i) p.weights.f32()[i] = i % 3 == 2 ? 0.0f : 0.25f + rng.uniform();
    return p;
}

struct Ref {
    std::vector<double> loss_rows;  // [R]
    std::vector<int32_t> argmax;    // [R]
    std::vector<double> dh;         // [R, D]
    std::vector<double> dw;         // [V, D]
    double loss = 0;                // grad_scale * sum_r weight_r * KL_r
};

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
        for (int64_t c = 0; c < v; ++c) ref.loss_rows[i] += std::exp(lp[c]) * (lp[c] - lq[c]);
        ref.loss += p.grad_scale * wt * ref.loss_rows[i];
        for (int64_t c = 0; c < v; ++c) {
            const double g = p.grad_scale * wt * (std::exp(lq[c]) - std::exp(lp[c]));
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
    cpu::lm_head_kl(cpu::PooledExec{threads}, p.h, p.t, p.w, p.weights, p.grad_scale, chunk,
                    {res.loss_rows, res.argmax, res.dh, res.dw, Tensor()});
    return res;
}

TEST(LmHeadKl, MatchesFullLogitsReference) {
    uint64_t seed = 1;
    for (int64_t v : {1, 17, 1000}) {
        for (int64_t chunk : {int64_t{7}, v, v + 13}) {
            for (int64_t r : {1, 5, 13}) {
                SCOPED_TRACE(fmt::format("V={} chunk={} R={}", v, chunk, r));
                const Problem p = make_problem(r, 6, v, seed++);
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

// V = 2, D = 1, w = [[1], [0]]: draft logits [ln 2, 0] (q = [2/3, 1/3]), teacher logits [0, 0]
// (p = [1/2, 1/2]). KL = 1/2 ln(3/4) + 1/2 ln(3/2) = 1/2 ln(9/8); q - p = [1/6, -1/6], so
// dh = 1/6 * 1 + (-1/6) * 0 = 1/6 and dw = (q - p) * h = [ln 2 / 6, -ln 2 / 6].
TEST(LmHeadKl, HandComputedTwoTokenCase) {
    Problem p{HostTensor({1, 1}), HostTensor({1, 1}), HostTensor({2, 1}), HostTensor({1}), 1.0f};
    p.h.f32()[0] = std::log(2.0f);
    p.t.f32()[0] = 0.0f;
    p.w.f32()[0] = 1.0f;
    p.w.f32()[1] = 0.0f;
    p.weights.f32()[0] = 1.0f;
    for (int64_t chunk : {1, 2}) {
        const Result got = run(p, chunk);
        EXPECT_NEAR(got.loss_rows.f32()[0], 0.5 * std::log(9.0 / 8.0), 1e-7);
        EXPECT_NEAR(got.dh.f32()[0], 1.0 / 6.0, 1e-7);
        EXPECT_NEAR(got.dw.f32()[0], std::log(2.0) / 6.0, 1e-7);
        EXPECT_NEAR(got.dw.f32()[1], -std::log(2.0) / 6.0, 1e-7);
        EXPECT_EQ(got.argmax.i32()[0], 0);
    }
}

TEST(LmHeadKl, DraftEqualToTeacherGivesExactlyZero) {
    Problem p = make_problem(8, 6, 300, 3);
    p.h = p.t.clone();
    for (int64_t chunk : {7, 300}) {
        const Result got = run(p, chunk, 2);
        for (int64_t i = 0; i < p.h.numel(); ++i) EXPECT_EQ(got.dh.f32()[i], 0.0f) << i;
        for (int64_t i = 0; i < p.w.numel(); ++i) EXPECT_EQ(got.dw.f32()[i], 0.0f) << i;
        for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(got.loss_rows.f32()[i], 0.0f) << i;
    }
}

TEST(LmHeadKl, ChunkSizeDoesNotChangeResults) {
    const Problem p = make_problem(9, 10, 300, 5);
    const Result whole = run(p, 300);
    for (int64_t chunk : {1, 3, 7, 64, 299, 1000}) {
        SCOPED_TRACE(fmt::format("chunk={}", chunk));
        const Result got = run(p, chunk, chunk % 2 == 0 ? 3 : 1);
        EXPECT_LT(test::max_abs_diff(got.loss_rows, whole.loss_rows), 1e-6);
        EXPECT_LT(test::max_rel_diff(got.dh, whole.dh), 1e-6);
        EXPECT_LT(test::max_rel_diff(got.dw, whole.dw), 1e-6);
        for (int64_t i = 0; i < 9; ++i) EXPECT_EQ(got.argmax.i32()[i], whole.argmax.i32()[i]);
    }
}

// 4-point central differences (support/finite_diff.h) of the double reference loss with respect
// to h (or w). The teacher is a constant: moving w moves only the draft side.
std::vector<double> finite_diff(const Problem& p, bool wrt_h) {
    const std::vector<double> h = to_double(p.h), t = to_double(p.t), w = to_double(p.w);
    const int64_t r = p.h.dim(0), d = p.h.dim(1), v = p.w.dim(0);
    std::vector<double> lp_rows(static_cast<size_t>(r * v)), tl(v);
    for (int64_t i = 0; i < r; ++i) {
        const std::vector<double> lp = log_softmax(t, w, i, d, v, tl);
        std::copy(lp.begin(), lp.end(), lp_rows.begin() + i * v);
    }
    const auto loss = [&](const std::vector<double>& x) {
        const std::vector<double>& hh = wrt_h ? x : h;
        const std::vector<double>& ww = wrt_h ? w : x;
        std::vector<double> dl(v);
        double total = 0;
        for (int64_t i = 0; i < r; ++i) {
            if (p.weights.f32()[i] == 0.0f) continue;
            const std::vector<double> lq = log_softmax(hh, ww, i, d, v, dl);
            double kl = 0;
            for (int64_t c = 0; c < v; ++c) {
                const double lp = lp_rows[i * v + c];
                kl += std::exp(lp) * (lp - lq[c]);
            }
            total += p.grad_scale * p.weights.f32()[i] * kl;
        }
        return total;
    };
    return test::fd_gradient(loss, wrt_h ? h : w, 1e-4);
}

TEST(LmHeadKl, GradientsMatchFiniteDifferences) {
    for (int64_t chunk : {4, 23}) {
        SCOPED_TRACE(fmt::format("chunk={}", chunk));
        const Problem p = make_problem(7, 5, 23, 17);
        const Result got = run(p, chunk);
        EXPECT_LT(max_rel_diff(got.dh.f32(), finite_diff(p, true)), 1e-4);
        EXPECT_LT(max_rel_diff(got.dw.f32(), finite_diff(p, false)), 1e-4);
    }
}

TEST(LmHeadKl, DwAccumulatesAndOutputsAreOptional) {
    const Problem p = make_problem(6, 5, 40, 21);
    const Result once = run(p, 9);
    HostTensor dw(p.w.shape());
    fill_f32(dw, 1.5f);
    cpu::lm_head_kl(cpu::PooledExec{2}, p.h, p.t, p.w, p.weights, p.grad_scale, 9,
                    {Tensor(), Tensor(), Tensor(), dw, Tensor()});
    for (int64_t i = 0; i < dw.numel(); ++i)
        EXPECT_NEAR(dw.f32()[i], 1.5f + once.dw.f32()[i], 1e-6) << i;
    HostTensor loss({6});
    cpu::lm_head_kl(cpu::PooledExec{1}, p.h, p.t, p.w, p.weights, p.grad_scale, 9,
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

}  // namespace
}  // namespace dflash

// cpu::lm_head_ce against a naive double-precision reference that materialises the full [R, V]
// logits. Tolerances: fp32 op vs double reference 1e-5 relative to max(1, |ref|) for losses and
// gradients; dh/dw vs central finite differences of the double reference loss 1e-4 (FD error is
// ~1e-9; the tolerance covers fp32 rounding in the op); chunk sizes agree to 1e-6.
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::max_rel_diff;
using test::random_tensor;
using test::to_double;

struct Problem {
    HostTensor h;        // [R, D]
    HostTensor w;        // [V, D]
    HostTensor labels;   // i32 [R]
    HostTensor weights;  // [R]
    float grad_scale = 1.0f;
};

// Rows alternate real labels with weight-0 rows whose label is -1 (every third row).
Problem make_problem(int64_t r, int64_t d, int64_t v, uint64_t seed) {
    Rng rng(seed);
    Problem p{random_tensor({r, d}, rng), random_tensor({v, d}, rng, 0.7f),
              HostTensor({r}, DType::i32), HostTensor({r}), 0.37f};
    for (int64_t i = 0; i < r; ++i) {
        const bool ignored = i % 3 == 2;
        p.labels.i32()[i] = ignored ? -1 : static_cast<int32_t>(rng.below(v));
        p.weights.f32()[i] = ignored ? 0.0f : 0.25f + rng.uniform();
    }
    return p;
}

struct Ref {
    std::vector<double> loss_rows;  // [R]
    std::vector<int32_t> argmax;    // [R]
    std::vector<double> dh;         // [R, D]
    std::vector<double> dw;         // [V, D]
    double loss = 0;                // grad_scale * sum_r weight_r * CE_r
};

Ref reference(const std::vector<double>& h, const std::vector<double>& w, const Problem& p) {
    const int64_t r = p.h.dim(0), d = p.h.dim(1), v = p.w.dim(0);
    Ref ref{std::vector<double>(r), std::vector<int32_t>(r), std::vector<double>(r * d, 0.0),
            std::vector<double>(v * d, 0.0)};
    std::vector<double> logits(v);
    for (int64_t i = 0; i < r; ++i) {
        double m = -INFINITY;
        for (int64_t c = 0; c < v; ++c) {
            double z = 0;
            for (int64_t k = 0; k < d; ++k) z += h[i * d + k] * w[c * d + k];
            logits[c] = z;
            if (z > m) m = z, ref.argmax[i] = static_cast<int32_t>(c);
        }
        double sum = 0;
        for (int64_t c = 0; c < v; ++c) sum += std::exp(logits[c] - m);
        const double lse = m + std::log(sum);
        const double wt = p.weights.f32()[i];
        if (wt == 0) continue;
        const int32_t label = p.labels.i32()[i];
        ref.loss_rows[i] = lse - logits[label];
        ref.loss += p.grad_scale * wt * ref.loss_rows[i];
        for (int64_t c = 0; c < v; ++c) {
            const double g = p.grad_scale * wt * (std::exp(logits[c] - lse) - (c == label));
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
    cpu::lm_head_ce(cpu::PooledExec{threads}, p.h, p.w, p.labels, p.weights, p.grad_scale, chunk,
                    {res.loss_rows, res.argmax, res.dh, res.dw, Tensor()});
    return res;
}

void expect_matches_reference(const Problem& p, int64_t chunk, const std::string& what) {
    SCOPED_TRACE(what);
    const Result got = run(p, chunk);
    const Ref ref = reference(to_double(p.h), to_double(p.w), p);
    EXPECT_LT(max_rel_diff(got.loss_rows.f32(), ref.loss_rows), 1e-5);
    EXPECT_LT(max_rel_diff(got.dh.f32(), ref.dh), 1e-5);
    EXPECT_LT(max_rel_diff(got.dw.f32(), ref.dw), 1e-5);
    for (int64_t i = 0; i < p.h.dim(0); ++i) {
        EXPECT_EQ(got.argmax.i32()[i], ref.argmax[i]) << "row " << i;
        if (p.weights.f32()[i] == 0.0f) {
            EXPECT_EQ(got.loss_rows.f32()[i], 0.0f) << "row " << i;
            for (int64_t k = 0; k < p.h.dim(1); ++k) {
                EXPECT_EQ(got.dh.f32()[i * p.h.dim(1) + k], 0.0f) << "row " << i;
            }
        }
    }
}

TEST(LmHeadCe, MatchesFullLogitsReference) {
    uint64_t seed = 1;
    for (int64_t v : {1, 17, 1000}) {
        for (int64_t chunk : {int64_t{7}, v, v + 13}) {
            for (int64_t r : {1, 5, 13}) {
                expect_matches_reference(make_problem(r, 6, v, seed++), chunk,
                                         fmt::format("V={} chunk={} R={}", v, chunk, r));
            }
        }
    }
}

TEST(LmHeadCe, ChunkSizeDoesNotChangeResults) {
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

TEST(LmHeadCe, ArgmaxTiesTakeLowestIndexAcrossAndWithinChunks) {
    const int64_t v = 20, d = 4;
    Problem p = make_problem(2, d, v, 9);
    // Vocabulary rows 10 and 11 are [10, 20, 30, 40]; row 3 is [0, 20, 30, 40]; the rest are small.
    for (int64_t k = 0; k < d; ++k) {
        const float x = 10.0f * static_cast<float>(k + 1);
        p.w.f32()[10 * d + k] = p.w.f32()[11 * d + k] = x;
        p.w.f32()[3 * d + k] = k == 0 ? 0.0f : x;
        p.h.f32()[0 * d + k] = 1.0f;            // logits 90 (3), 100 (10), 100 (11): tie 10/11
        p.h.f32()[1 * d + k] = k == 0 ? 0 : 1;  // logits 90 (3), 90 (10), 90 (11): tie 3/10/11
    }
    // The chunk sizes put the tied indices in the same chunk or in different chunks.
    for (int64_t chunk : {1, 7, 10, 11, 20}) {
        const Result got = run(p, chunk);
        EXPECT_EQ(got.argmax.i32()[0], 10) << "chunk " << chunk;
        EXPECT_EQ(got.argmax.i32()[1], 3) << "chunk " << chunk;
    }
}

// Central differences of grad_scale * sum_r weight_r * CE_r through the double reference.
std::vector<double> finite_diff(const Problem& p, bool wrt_h) {
    std::vector<double> h = to_double(p.h), w = to_double(p.w);
    std::vector<double>& x = wrt_h ? h : w;
    constexpr double kEps = 1e-5;
    std::vector<double> g(x.size());
    for (size_t e = 0; e < x.size(); ++e) {
        const double x0 = x[e];
        x[e] = x0 + kEps;
        const double lp = reference(h, w, p).loss;
        x[e] = x0 - kEps;
        const double lm = reference(h, w, p).loss;
        x[e] = x0;
        g[e] = (lp - lm) / (2 * kEps);
    }
    return g;
}

TEST(LmHeadCe, GradientsMatchFiniteDifferences) {
    for (int64_t chunk : {4, 23}) {
        SCOPED_TRACE(fmt::format("chunk={}", chunk));
        const Problem p = make_problem(7, 5, 23, 17);
        const Result got = run(p, chunk);
        EXPECT_LT(max_rel_diff(got.dh.f32(), finite_diff(p, true)), 1e-4);
        EXPECT_LT(max_rel_diff(got.dw.f32(), finite_diff(p, false)), 1e-4);
    }
}

TEST(LmHeadCe, DwAccumulatesAndOutputsAreOptional) {
    const Problem p = make_problem(6, 5, 40, 21);
    const Result once = run(p, 9);
    HostTensor dw(p.w.shape());
    fill_f32(dw, 1.5f);
    cpu::lm_head_ce(cpu::PooledExec{2}, p.h, p.w, p.labels, p.weights, p.grad_scale, 9,
                    {Tensor(), Tensor(), Tensor(), dw, Tensor()});
    for (int64_t i = 0; i < dw.numel(); ++i) {
        EXPECT_NEAR(dw.f32()[i], 1.5f + once.dw.f32()[i], 1e-6) << i;
    }
    HostTensor loss({6});
    cpu::lm_head_ce(cpu::PooledExec{1}, p.h, p.w, p.labels, p.weights, p.grad_scale, 9,
                    {loss, Tensor(), Tensor(), Tensor(), Tensor()});
    EXPECT_EQ(test::max_abs_diff(loss, once.loss_rows), 0.0);
}

TEST(LmHeadCe, LabelOutsideVocabularyWithWeightIsAnError) {
    Problem p = make_problem(4, 3, 10, 31);
    p.labels.i32()[1] = 10;
    p.weights.f32()[1] = 1.0f;
    try {
        run(p, 4);
        FAIL() << "expected an error for labels[1]=10";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("labels[1]=10"), std::string::npos) << msg;
        EXPECT_NE(msg.find("[0, 10)"), std::string::npos) << msg;
    }
    p.labels.i32()[1] = -3;
    EXPECT_THROW(run(p, 4), Error);
    p.weights.f32()[1] = 0.0f;  // an ignored row may carry any label
    EXPECT_NO_THROW(run(p, 4));
    EXPECT_THROW(run(p, 0), Error);  // chunk must be >= 1
}

}  // namespace
}  // namespace dflash

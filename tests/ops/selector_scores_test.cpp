// cpu::selector_scores_fwd/bwd (DFlash2's candidate-selector pair scores, docs/formats.md "DFlash2
// drafter directory"): a hand-computed case, the forward against a double formula on awkward sizes
// with repeated ids, the backward (dz, and the codebook gradients accumulated at repeated rows)
// against finite differences, and id/shape errors.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::random_tensor;

struct Dims {
    int64_t P, Kp, K, r, V;
};

std::vector<double> reference(const Dims& d, const std::vector<double>& z,
                              const std::vector<int32_t>& pred, const std::vector<int32_t>& cand,
                              const std::vector<double>& a, const std::vector<double>& b) {
    std::vector<double> s(d.P * d.Kp * d.K, 0.0);
    for (int64_t p = 0; p < d.P; ++p)
        for (int64_t i = 0; i < d.Kp; ++i)
            for (int64_t j = 0; j < d.K; ++j)
                for (int64_t q = 0; q < d.r; ++q)
                    s[(p * d.Kp + i) * d.K + j] += a[pred[p * d.Kp + i] * d.r + q] *
                                                   z[p * d.r + q] * b[cand[p * d.K + j] * d.r + q];
    return s;
}

// ids as an i32 [rows, n / rows] tensor.
HostTensor ids2(const std::vector<int32_t>& v, int64_t rows) {
    HostTensor t({rows, static_cast<int64_t>(v.size()) / rows}, DType::i32);
    std::copy(v.begin(), v.end(), t.i32());
    return t;
}

std::vector<int32_t> random_ids(int64_t n, int64_t v, Rng& rng) {
    std::vector<int32_t> ids(n);
    for (auto& id : ids) id = static_cast<int32_t>(rng.uniform_f64() * static_cast<double>(v));
    return ids;
}

TEST(SelectorScores, HandComputed) {
    // V = 3, r = 2, one slot, predecessor 2, candidates {0, 1}.
    HostTensor a = HostTensor::from_f32({3, 2}, {0, 0, 0, 0, 1, 2});
    HostTensor b = HostTensor::from_f32({3, 2}, {3, 4, -1, 1, 0, 0});
    HostTensor z = HostTensor::from_f32({1, 2}, {0.5f, 2});
    HostTensor out({1, 1, 2});
    cpu::selector_scores_fwd(cpu::PooledExec{1}, z, ids2({2}, 1), ids2({0, 1}, 1), a, b, out);
    EXPECT_FLOAT_EQ(out.f32()[0], 1 * 0.5f * 3 + 2 * 2 * 4);   // 17.5
    EXPECT_FLOAT_EQ(out.f32()[1], 1 * 0.5f * -1 + 2 * 2 * 1);  // 3.5
}

TEST(SelectorScores, ForwardMatchesFormulaOnAwkwardSizes) {
    Rng rng(7);
    for (const Dims& d : {Dims{5, 7, 7, 9, 11}, Dims{3, 1, 16, 33, 50}, Dims{1, 4, 3, 1, 2}}) {
        HostTensor z = random_tensor({d.P, d.r}, rng), a = random_tensor({d.V, d.r}, rng),
                   b = random_tensor({d.V, d.r}, rng), out({d.P, d.Kp, d.K});
        const auto pred = random_ids(d.P * d.Kp, d.V, rng), cand = random_ids(d.P * d.K, d.V, rng);
        cpu::selector_scores_fwd(cpu::PooledExec{2}, z, ids2(pred, d.P), ids2(cand, d.P), a, b,
                                 out);
        const auto ref =
            reference(d, test::to_double(z), pred, cand, test::to_double(a), test::to_double(b));
        EXPECT_LT(test::max_rel_diff(out.f32(), ref), 1e-5) << d.P << "," << d.K;
    }
}

TEST(SelectorScores, BackwardMatchesFiniteDifferences) {
    Rng rng(8);
    // V small so that ids repeat across slots and within a row (accumulation at shared rows).
    const Dims d{4, 3, 5, 6, 4};
    HostTensor z = random_tensor({d.P, d.r}, rng), a = random_tensor({d.V, d.r}, rng),
               b = random_tensor({d.V, d.r}, rng), g = random_tensor({d.P, d.Kp, d.K}, rng);
    const auto pred = random_ids(d.P * d.Kp, d.V, rng), cand = random_ids(d.P * d.K, d.V, rng);
    HostTensor dz({d.P, d.r}), da({d.V, d.r}), db({d.V, d.r});
    fill_f32(da, 0.25f);
    fill_f32(db, -0.5f);
    cpu::selector_scores_bwd(cpu::PooledExec{3}, g, z, ids2(pred, d.P), ids2(cand, d.P), a, b, dz,
                             da, db);
    const auto zv = test::to_double(z), av = test::to_double(a), bv = test::to_double(b),
               gv = test::to_double(g);
    auto loss = [&](const std::vector<double>& za, const std::vector<double>& aa,
                    const std::vector<double>& ba) {
        const auto s = reference(d, za, pred, cand, aa, ba);
        double l = 0;
        for (size_t i = 0; i < s.size(); ++i) l += gv[i] * s[i];
        return l;
    };
    const auto nz = test::fd_gradient([&](const auto& v) { return loss(v, av, bv); }, zv, 1e-3);
    auto na = test::fd_gradient([&](const auto& v) { return loss(zv, v, bv); }, av, 1e-3);
    auto nb = test::fd_gradient([&](const auto& v) { return loss(zv, av, v); }, bv, 1e-3);
    for (auto& v : na) v += 0.25;
    for (auto& v : nb) v -= 0.5;
    const auto rz = test::compare_gradients(test::to_double(dz), nz);
    const auto ra = test::compare_gradients(test::to_double(da), na);
    const auto rb = test::compare_gradients(test::to_double(db), nb);
    EXPECT_LT(rz.max_rel_err, 1e-5) << "dz " << rz.to_string();
    EXPECT_LT(ra.max_rel_err, 1e-5) << "dA " << ra.to_string();
    EXPECT_LT(rb.max_rel_err, 1e-5) << "dB " << rb.to_string();
}

TEST(SelectorScores, ErrorsNameTheProblem) {
    const cpu::PooledExec ex{1};
    HostTensor z({2, 3}), a({5, 3}), b({5, 3}), out({2, 1, 2});
    HostTensor pred = ids2({1, 4}, 2);
    HostTensor cand = ids2({0, 1, 2, 5}, 2);
    EXPECT_TRUE(
        test::has(test::error_of([&] { cpu::selector_scores_fwd(ex, z, pred, cand, a, b, out); }),
                  "candidate id 5"));
    HostTensor bad_out({2, 2, 2});
    EXPECT_THROW(cpu::selector_scores_fwd(ex, z, pred, ids2({0, 1, 2, 3}, 2), a, b, bad_out),
                 Error);
}

}  // namespace
}  // namespace dflash

// cpu::markov_rnn_fwd/bwd (DSpark's rnn Markov head, recipe spec §1.2; docs/training.md "DSpark
// drafters"): the forward against a double formula written from the spec (awkward sizes, j wider
// than the state's columns, several blocks whose states restart), the backward (dact, dbias, and
// j's state-column gradient dactᵀ s_prev) against finite differences of sum(dout * out), s_prev
// against the forward's states, and shape errors.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::random_tensor;

struct Case {
    int64_t R, r, C, bs;
};

double sigm(double x) {
    return 1.0 / (1.0 + std::exp(-x));
}

// out [R, r] by the spec's formulas in double; states (optional) receives s_{k-1} of every row.
std::vector<double> reference(const Case& cs, const std::vector<double>& pre,
                              const std::vector<double>& bias, const std::vector<double>& j,
                              std::vector<double>* states = nullptr) {
    const int64_t r = cs.r, A = 3 * r;
    std::vector<double> out(static_cast<size_t>(cs.R * r)), s(static_cast<size_t>(r));
    if (states) states->assign(static_cast<size_t>(cs.R * r), 0.0);
    for (int64_t row = 0; row < cs.R; ++row) {
        if (row % cs.bs == 0) std::fill(s.begin(), s.end(), 0.0);
        std::vector<double> a(static_cast<size_t>(A));
        for (int64_t i = 0; i < A; ++i) {
            double acc = pre[row * A + i] + bias[i];
            for (int64_t c = 0; c < r; ++c) acc += j[i * cs.C + c] * s[c];
            a[i] = acc;
        }
        for (int64_t c = 0; c < r; ++c) {
            if (states) (*states)[row * r + c] = s[c];
            const double g = sigm(a[c]);
            s[c] = g * s[c] + (1 - g) * std::tanh(a[r + c]);
            out[row * r + c] = std::tanh(a[2 * r + c]);
        }
    }
    return out;
}

TEST(MarkovRnn, ForwardMatchesFormulaOnAwkwardSizes) {
    Rng rng(3);
    for (const Case& cs : {Case{12, 3, 3, 4}, Case{14, 5, 17, 7}, Case{5, 2, 9, 1},
                           Case{9, 7, 30, 9}, Case{16, 1, 4, 8}}) {
        HostTensor pre = random_tensor({cs.R, 3 * cs.r}, rng);
        HostTensor bias = random_tensor({3 * cs.r}, rng);
        HostTensor j = random_tensor({3 * cs.r, cs.C}, rng);
        HostTensor act({cs.R, 3 * cs.r}), out({cs.R, cs.r});
        cpu::markov_rnn_fwd(cpu::PooledExec{2}, pre, bias, j, cs.bs, act, out);
        const auto ref =
            reference(cs, test::to_double(pre), test::to_double(bias), test::to_double(j));
        EXPECT_LT(test::max_rel_diff(out.f32(), ref), 1e-5) << cs.R << "x" << cs.r;
    }
}

// The state restarts at every block: changing block 0's rows never changes block 1's output,
// and a later slot of a block does depend on its earlier slots.
TEST(MarkovRnn, StateRestartsAtEveryBlock) {
    Rng rng(4);
    const Case cs{8, 3, 6, 4};
    HostTensor pre = random_tensor({cs.R, 9}, rng), bias = random_tensor({9}, rng);
    HostTensor j = random_tensor({9, cs.C}, rng, 2.0f);
    HostTensor act({cs.R, 9}), y0({cs.R, 3}), y1({cs.R, 3});
    cpu::markov_rnn_fwd(cpu::PooledExec{1}, pre, bias, j, cs.bs, act, y0);
    for (int64_t i = 0; i < 9; ++i) pre.f32()[1 * 9 + i] += 1.0f;  // slot 1 of block 0
    cpu::markov_rnn_fwd(cpu::PooledExec{1}, pre, bias, j, cs.bs, act, y1);
    for (int64_t row = 0; row < cs.R; ++row) {
        bool changed = false;
        for (int64_t c = 0; c < 3; ++c) changed |= y0.f32()[row * 3 + c] != y1.f32()[row * 3 + c];
        EXPECT_EQ(changed, row >= 1 && row < 4) << "row " << row;
    }
}

// L = sum(dout * out) in double with h = 1e-4 on pre, bias and j (only j's first r columns
// matter): tolerance 1e-4 of the gradient's scale (the op computes in f32).
TEST(MarkovRnn, BackwardMatchesFiniteDifferences) {
    Rng rng(5);
    for (const Case& cs : {Case{8, 3, 5, 4}, Case{6, 2, 2, 3}, Case{5, 4, 6, 5}}) {
        const int64_t A = 3 * cs.r;
        HostTensor pre = random_tensor({cs.R, A}, rng), bias = random_tensor({A}, rng);
        HostTensor j = random_tensor({A, cs.C}, rng), dout = random_tensor({cs.R, cs.r}, rng);
        HostTensor act({cs.R, A}), out({cs.R, cs.r});
        cpu::markov_rnn_fwd(cpu::PooledExec{1}, pre, bias, j, cs.bs, act, out);
        HostTensor dact({cs.R, A}), dbias({A}), s_prev({cs.R, cs.r});
        fill_f32(dbias, 0.5f);  // accumulated into
        cpu::markov_rnn_bwd(cpu::PooledExec{2}, dout, act, j, cs.bs, dact, dbias, s_prev);
        const auto pv = test::to_double(pre), bv = test::to_double(bias), jv = test::to_double(j),
                   g = test::to_double(dout);
        auto loss = [&](const std::vector<double>& p, const std::vector<double>& b,
                        const std::vector<double>& jj) {
            const auto y = reference(cs, p, b, jj);
            double l = 0;
            for (size_t i = 0; i < y.size(); ++i) l += g[i] * y[i];
            return l;
        };
        const auto np = test::fd_gradient([&](const auto& v) { return loss(v, bv, jv); }, pv, 1e-4);
        auto nb = test::fd_gradient([&](const auto& v) { return loss(pv, v, jv); }, bv, 1e-4);
        const auto nj = test::fd_gradient([&](const auto& v) { return loss(pv, bv, v); }, jv, 1e-4);
        for (auto& v : nb) v += 0.5;
        // j's gradient from the op's outputs: dact^T s_prev in the state columns, 0 elsewhere.
        std::vector<double> aj(static_cast<size_t>(A * cs.C), 0.0);
        for (int64_t i = 0; i < A; ++i)
            for (int64_t c = 0; c < cs.r; ++c)
                for (int64_t row = 0; row < cs.R; ++row)
                    aj[i * cs.C + c] +=
                        double{dact.f32()[row * A + i]} * s_prev.f32()[row * cs.r + c];
        const auto rp = test::compare_gradients(test::to_double(dact), np);
        const auto rb = test::compare_gradients(test::to_double(dbias), nb);
        const auto rj = test::compare_gradients(aj, nj);
        EXPECT_LT(rp.max_rel_err, 1e-4) << "dact " << rp.to_string();
        EXPECT_LT(rb.max_rel_err, 1e-4) << "dbias " << rb.to_string();
        EXPECT_LT(rj.max_rel_err, 1e-4) << "dj " << rj.to_string();
        // s_prev: the forward's states before each slot (0 at every block's slot 0).
        std::vector<double> states;
        reference(cs, pv, bv, jv, &states);
        double worst = 0;
        for (size_t i = 0; i < states.size(); ++i)
            worst = std::max(worst, std::fabs(s_prev.f32()[i] - states[i]));
        EXPECT_LT(worst, 1e-5);
    }
}

TEST(MarkovRnn, ShapeErrorsNameTheProblem) {
    const cpu::PooledExec ex{1};
    HostTensor pre({8, 9}), bias({9}), j({9, 5}), act({8, 9}), out({8, 3});
    EXPECT_NO_THROW(cpu::markov_rnn_fwd(ex, pre, bias, j, 4, act, out));
    EXPECT_TRUE(
        test::has(test::error_of([&] { cpu::markov_rnn_fwd(ex, pre, bias, j, 3, act, out); }),
                  "block_size=3"));
    HostTensor narrow({9, 2});
    EXPECT_TRUE(
        test::has(test::error_of([&] { cpu::markov_rnn_fwd(ex, pre, bias, narrow, 4, act, out); }),
                  "markov_rnn_fwd: j"));
    HostTensor bias8({8});
    EXPECT_TRUE(test::has(
        test::error_of([&] { cpu::markov_rnn_fwd(ex, pre, bias8, j, 4, act, out); }), "bias"));
    HostTensor dact({8, 9}), dbias({9}), s_prev({8, 3}), s_bad({8, 2});
    EXPECT_NO_THROW(cpu::markov_rnn_bwd(ex, out, act, j, 4, dact, dbias, s_prev));
    EXPECT_TRUE(test::has(
        test::error_of([&] { cpu::markov_rnn_bwd(ex, out, act, j, 4, dact, dbias, s_bad); }),
        "s_prev"));
}

}  // namespace
}  // namespace dflash

// cpu::dyn_conv_fwd/bwd (DFlash2's grouped dynamic causal convolution, docs/formats.md "DFlash2
// drafter directory"): a hand-computed tiny case, the forward against a double formula written from
// the spec (blocks, both halves, awkward sizes), taps never crossing a block, the backward against
// finite differences, and shape errors.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::random_tensor;

struct Case {
    int64_t R, D, k, G, bs;
};

// y[r, c] = sum_{t <= min(k-1, r % bs)} (base[h,t,c] + delta[r, (h k + t) G + c / (D/G)]) x[r-t, c]
std::vector<double> reference(const Case& cs, int64_t half, const std::vector<double>& x,
                              const std::vector<double>& base, const std::vector<double>& delta) {
    const int64_t S = cs.D / cs.G;
    std::vector<double> y(cs.R * cs.D, 0.0);
    for (int64_t r = 0; r < cs.R; ++r)
        for (int64_t c = 0; c < cs.D; ++c)
            for (int64_t t = 0; t < cs.k; ++t) {
                if (r % cs.bs < t) continue;
                const double w = base[(half * cs.k + t) * cs.D + c] +
                                 delta[r * 2 * cs.k * cs.G + (half * cs.k + t) * cs.G + c / S];
                y[r * cs.D + c] += w * x[(r - t) * cs.D + c];
            }
    return y;
}

TEST(DynConv, HandComputedTwoTaps) {
    // R = 3 rows in one block, D = 2 channels in one group, k = 2, half 1 (the "after" kernel).
    HostTensor x = HostTensor::from_f32({3, 2}, {1, 2, 3, 4, 5, 6});
    // base[0] is ignored by half 1; base[1] = [[1, 1], [0.5, 2]].
    HostTensor base = HostTensor::from_f32({2, 2, 2}, {9, 9, 9, 9, 1, 1, 0.5f, 2});
    // delta columns (h, t): (0,0), (0,1), (1,0), (1,1); only the last two matter.
    HostTensor delta = HostTensor::from_f32({3, 4}, {7, 7, 0, 100, 7, 7, 1, 0, 7, 7, 0, -1});
    HostTensor y({3, 2});
    cpu::dyn_conv_fwd(cpu::PooledExec{1}, x, base, delta, 1, 3, y);
    // Row 0 sees only itself: (1 + 0) * x0 (tap 1's huge delta must not matter).
    // Row 1: (1 + 1) * x1 + (base t1 + 0) * x0 = [2*3 + 0.5*1, 2*4 + 2*2] = [6.5, 12].
    // Row 2: (1 + 0) * x2 + (base t1 - 1) * x1 = [5 - 0.5*3, 6 + 1*4] = [3.5, 10].
    const std::vector<float> want = {1, 2, 6.5f, 12, 3.5f, 10};
    for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y.f32()[i], want[i]) << i;
    // With block_size 1 every row sees only itself: y = (base t0 + delta t0) * x.
    cpu::dyn_conv_fwd(cpu::PooledExec{1}, x, base, delta, 1, 1, y);
    EXPECT_FLOAT_EQ(y.f32()[2], 2 * 3.0f);
    EXPECT_FLOAT_EQ(y.f32()[5], 1 * 6.0f);
}

TEST(DynConv, ForwardMatchesFormulaOnAwkwardSizes) {
    Rng rng(3);
    for (const Case& cs : {Case{12, 6, 2, 3, 4}, Case{15, 20, 3, 4, 5}, Case{7, 9, 2, 1, 7},
                           Case{8, 16, 4, 16, 8}, Case{6, 5, 1, 5, 3}}) {
        for (int64_t half : {0, 1}) {
            HostTensor x = random_tensor({cs.R, cs.D}, rng);
            HostTensor base = random_tensor({2, cs.k, cs.D}, rng);
            HostTensor delta = random_tensor({cs.R, 2 * cs.k * cs.G}, rng);
            HostTensor y({cs.R, cs.D});
            cpu::dyn_conv_fwd(cpu::PooledExec{2}, x, base, delta, half, cs.bs, y);
            const auto ref = reference(cs, half, test::to_double(x), test::to_double(base),
                                       test::to_double(delta));
            EXPECT_LT(test::max_rel_diff(y.f32(), ref), 1e-6) << cs.R << "x" << cs.D;
        }
    }
}

// Changing a row of one block never changes another block's output.
TEST(DynConv, TapsNeverCrossABlock) {
    Rng rng(4);
    const Case cs{12, 8, 3, 2, 4};
    HostTensor x = random_tensor({cs.R, cs.D}, rng), base = random_tensor({2, cs.k, cs.D}, rng);
    HostTensor delta = random_tensor({cs.R, 2 * cs.k * cs.G}, rng), y0({cs.R, cs.D}),
               y1({cs.R, cs.D});
    cpu::dyn_conv_fwd(cpu::PooledExec{1}, x, base, delta, 0, cs.bs, y0);
    for (int64_t c = 0; c < cs.D; ++c) x.f32()[3 * cs.D + c] += 10.0f;  // last row of block 0
    cpu::dyn_conv_fwd(cpu::PooledExec{1}, x, base, delta, 0, cs.bs, y1);
    for (int64_t r = 0; r < cs.R; ++r) {
        bool changed = false;
        for (int64_t c = 0; c < cs.D; ++c)
            changed |= y0.f32()[r * cs.D + c] != y1.f32()[r * cs.D + c];
        EXPECT_EQ(changed, r == 3) << "row " << r;
    }
}

// L = sum(dy * y) in double with h = 1e-3: tolerance 1e-5 of the gradient's scale.
TEST(DynConv, BackwardMatchesFiniteDifferences) {
    Rng rng(5);
    for (const Case& cs : {Case{10, 6, 2, 3, 5}, Case{9, 4, 3, 2, 3}}) {
        for (int64_t half : {0, 1}) {
            HostTensor x = random_tensor({cs.R, cs.D}, rng);
            HostTensor base = random_tensor({2, cs.k, cs.D}, rng);
            HostTensor delta = random_tensor({cs.R, 2 * cs.k * cs.G}, rng);
            HostTensor dy = random_tensor({cs.R, cs.D}, rng);
            HostTensor dx({cs.R, cs.D}), dbase({2, cs.k, cs.D}), ddelta({cs.R, 2 * cs.k * cs.G});
            fill_f32(dbase, 0.5f);     // accumulated into
            fill_f32(ddelta, 123.0f);  // the other half must be left alone
            cpu::dyn_conv_bwd(cpu::PooledExec{2}, dy, x, base, delta, half, cs.bs, dx, dbase,
                              ddelta);
            const auto xv = test::to_double(x), bv = test::to_double(base),
                       dv = test::to_double(delta), g = test::to_double(dy);
            auto loss = [&](const std::vector<double>& xa, const std::vector<double>& ba,
                            const std::vector<double>& da) {
                const auto y = reference(cs, half, xa, ba, da);
                double l = 0;
                for (size_t i = 0; i < y.size(); ++i) l += g[i] * y[i];
                return l;
            };
            const auto nx =
                test::fd_gradient([&](const auto& v) { return loss(v, bv, dv); }, xv, 1e-3);
            auto nb = test::fd_gradient([&](const auto& v) { return loss(xv, v, dv); }, bv, 1e-3);
            auto nd = test::fd_gradient([&](const auto& v) { return loss(xv, bv, v); }, dv, 1e-3);
            for (auto& v : nb) v += 0.5;
            const int64_t kg = cs.k * cs.G;
            for (int64_t r = 0; r < cs.R; ++r)
                for (int64_t j = 0; j < 2 * kg; ++j)
                    if (j / kg != half) nd[r * 2 * kg + j] = 123.0;
            const auto rx = test::compare_gradients(test::to_double(dx), nx);
            const auto rb = test::compare_gradients(test::to_double(dbase), nb);
            const auto rd = test::compare_gradients(test::to_double(ddelta), nd);
            EXPECT_LT(rx.max_rel_err, 1e-5) << "dx " << rx.to_string();
            EXPECT_LT(rb.max_rel_err, 1e-5) << "dbase " << rb.to_string();
            EXPECT_LT(rd.max_rel_err, 1e-5) << "ddelta " << rd.to_string();
        }
    }
}

TEST(DynConv, ShapeErrorsNameTheProblem) {
    const cpu::PooledExec ex{1};
    HostTensor x({8, 6}), base({2, 2, 6}), delta({8, 12}), y({8, 6});
    HostTensor bad_delta({8, 10}), groups5({8, 20});
    EXPECT_NO_THROW(cpu::dyn_conv_fwd(ex, x, base, delta, 0, 4, y));
    EXPECT_TRUE(test::has(test::error_of([&] { cpu::dyn_conv_fwd(ex, x, base, delta, 0, 3, y); }),
                          "block_size=3"));
    EXPECT_TRUE(test::has(
        test::error_of([&] { cpu::dyn_conv_fwd(ex, x, base, bad_delta, 0, 4, y); }), "delta"));
    EXPECT_TRUE(test::has(test::error_of([&] { cpu::dyn_conv_fwd(ex, x, base, groups5, 0, 4, y); }),
                          "5 groups"));
    EXPECT_THROW(cpu::dyn_conv_fwd(ex, x, base, delta, 2, 4, y), Error);
}

}  // namespace
}  // namespace dflash

// cpu::swiglu_fwd/bwd: forward against a double formula (including saturated gates), backward
// against finite differences, shape errors, thread-count independence.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::random_tensor;

double silu(double g) {
    return g / (1.0 + std::exp(-g));
}

TEST(SwiGlu, ForwardMatchesDoubleFormula) {
    Rng rng(1);
    for (const Shape& s : {Shape{1, 1}, Shape{7, 13}, Shape{3, 515}}) {
        HostTensor g = random_tensor(s, rng, 3.0f), u = random_tensor(s, rng), out(s), ref(s);
        for (int64_t i = 0; i < g.numel(); ++i)
            ref.f32()[i] = static_cast<float>(silu(g.f32()[i]) * u.f32()[i]);
        cpu::swiglu_fwd(cpu::PooledExec{2}, g, u, out);
        // exp and three float operations: 1e-6 of the largest output.
        EXPECT_LT(test::max_rel_diff(out, ref), 1e-6) << s.to_string();
    }
}

TEST(SwiGlu, SaturatedGatesStayFinite) {
    const std::vector<float> gv = {-1e4f, -100.0f, -88.8f, 0.0f, 88.8f, 100.0f, 1e4f};
    const int64_t n = static_cast<int64_t>(gv.size());
    HostTensor g = HostTensor::from_f32({n}, gv), u({n}), out({n}), dout({n}), dg({n}), du({n});
    fill_f32(u, 2.0f);
    fill_f32(dout, 1.0f);
    cpu::swiglu_fwd(cpu::PooledExec{1}, g, u, out);
    cpu::swiglu_bwd(cpu::PooledExec{1}, dout, g, u, dg, du);
    for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(out.f32()[i]) && std::isfinite(dg.f32()[i])) << gv[i];
        EXPECT_NEAR(out.f32()[i], gv[i] > 0 ? 2.0f * gv[i] : 0.0f, 1e-6f * std::fabs(gv[i]));
        // silu'(g) -> 1 for large g, 0 for very negative g, and silu'(0) = 1/2.
        const float dsilu = gv[i] > 0 ? 1.0f : (gv[i] == 0 ? 0.5f : 0.0f);
        EXPECT_NEAR(dg.f32()[i], 2.0f * dsilu, 1e-6f) << gv[i];
    }
}

// L(g, u) = sum(dout * silu(g) * u) in double with h = 1e-3: truncation ~1e-12, so the residual
// is the float backward's rounding; tolerance 1e-5 of the gradient's scale.
TEST(SwiGlu, BackwardMatchesFiniteDifferences) {
    Rng rng(2);
    const Shape s{3, 7};
    HostTensor g = random_tensor(s, rng, 3.0f), u = random_tensor(s, rng);
    HostTensor dout = random_tensor(s, rng), dg(s), du(s);
    cpu::swiglu_bwd(cpu::PooledExec{1}, dout, g, u, dg, du);
    const std::vector<double> gv(g.f32(), g.f32() + g.numel()), uv(u.f32(), u.f32() + u.numel());
    auto loss = [&](const std::vector<double>& ga, const std::vector<double>& ua) {
        double l = 0;
        for (size_t i = 0; i < ga.size(); ++i) l += dout.f32()[i] * silu(ga[i]) * ua[i];
        return l;
    };
    const auto ng = test::fd_gradient([&](const auto& v) { return loss(v, uv); }, gv, 1e-3);
    const auto nu = test::fd_gradient([&](const auto& v) { return loss(gv, v); }, uv, 1e-3);
    const auto rg = test::compare_gradients({dg.f32(), dg.f32() + dg.numel()}, ng);
    const auto ru = test::compare_gradients({du.f32(), du.f32() + du.numel()}, nu);
    EXPECT_LT(rg.max_rel_err, 1e-5) << "dgate " << rg.to_string();
    EXPECT_LT(ru.max_rel_err, 1e-5) << "dup " << ru.to_string();
}

TEST(SwiGlu, ShapeErrors) {
    const cpu::PooledExec ex{1};
    HostTensor g({4, 6}), u({4, 6}), out({4, 6}), bad({4, 5}), flat({24});
    EXPECT_THROW(cpu::swiglu_fwd(ex, g, bad, out), Error);
    EXPECT_THROW(cpu::swiglu_fwd(ex, g, u, flat), Error);
    EXPECT_THROW(cpu::swiglu_bwd(ex, out, g, u, bad, out), Error);
    HostTensor gi({4, 6}, DType::i32);
    EXPECT_THROW(cpu::swiglu_fwd(ex, gi, u, out), Error);
}

TEST(SwiGlu, ThreadCountDoesNotChangeBits) {
    Rng rng(3);
    const Shape s{67, 515};
    HostTensor g = random_tensor(s, rng, 3.0f), u = random_tensor(s, rng);
    HostTensor dout = random_tensor(s, rng);
    HostTensor o1(s), o3(s), dg1(s), dg3(s), du1(s), du3(s);
    cpu::swiglu_fwd(cpu::PooledExec{1}, g, u, o1);
    cpu::swiglu_fwd(cpu::PooledExec{3}, g, u, o3);
    cpu::swiglu_bwd(cpu::PooledExec{1}, dout, g, u, dg1, du1);
    cpu::swiglu_bwd(cpu::PooledExec{3}, dout, g, u, dg3, du3);
    EXPECT_EQ(std::memcmp(o1.f32(), o3.f32(), o1.nbytes()), 0);
    EXPECT_EQ(std::memcmp(dg1.f32(), dg3.f32(), dg1.nbytes()), 0);
    EXPECT_EQ(std::memcmp(du1.f32(), du3.f32(), du1.nbytes()), 0);
}

}  // namespace
}  // namespace dflash

// cpu::adamw_step against a scalar double reference over several steps (torch.optim.AdamW
// semantics), a hand-checked first step, parameter errors; cpu::sum_squares in double; both
// independent of the thread count.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::random_tensor;

struct RefState {
    std::vector<double> p, m, v;
};

// torch.optim.AdamW, in double: p *= 1 - lr wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
void ref_step(RefState& s, const std::vector<double>& g, const AdamWParams& a) {
    const double bc1 = 1 - std::pow(double(a.beta1), double(a.step));
    const double bc2 = 1 - std::pow(double(a.beta2), double(a.step));
    for (size_t i = 0; i < s.p.size(); ++i) {
        s.p[i] *= 1 - double(a.lr) * a.weight_decay;
        s.m[i] = a.beta1 * s.m[i] + (1 - double(a.beta1)) * g[i];
        s.v[i] = a.beta2 * s.v[i] + (1 - double(a.beta2)) * g[i] * g[i];
        s.p[i] -= a.lr * (s.m[i] / bc1) / (std::sqrt(s.v[i] / bc2) + a.eps);
    }
}

float sum_squares(const cpu::Exec& ex, const Tensor& t) {
    HostTensor out({1});
    cpu::sum_squares(ex, t, out);
    return out.f32()[0];
}

TEST(AdamW, MatchesScalarReferenceOverSeveralSteps) {
    Rng rng(1);
    const int64_t n = 37;
    HostTensor p = random_tensor({n}, rng), m({n}), v({n});
    RefState ref{{p.f32(), p.f32() + n}, std::vector<double>(n), std::vector<double>(n)};
    AdamWParams a;
    a.lr = 1e-2f;
    a.weight_decay = 0.1f;
    for (int step = 1; step <= 6; ++step) {
        HostTensor g = random_tensor({n}, rng, step == 3 ? 1e-3f : 1.0f);  // one tiny-grad step
        a.step = step;
        cpu::adamw_step(cpu::PooledExec{2}, p, g, m, v, a, Tensor(), Tensor());
        ref_step(ref, {g.f32(), g.f32() + n}, a);
        for (int64_t i = 0; i < n; ++i) {
            // Float rounding of a handful of operations per step, accumulated over 6 steps:
            // |p| ~ 1 with updates ~ lr, so 1e-6 absolute. m can be a cancellation of O(1) terms
            // (after the tiny-gradient step), so it gets 1e-6 absolute too; v sums positive terms
            // and gets 1e-6 relative.
            ASSERT_NEAR(p.f32()[i], ref.p[i], 1e-6) << "step " << step << " i " << i;
            ASSERT_NEAR(m.f32()[i], ref.m[i], 1e-6) << "step " << step << " i " << i;
            ASSERT_NEAR(v.f32()[i], ref.v[i], 1e-6 * ref.v[i]) << "step " << step << " i " << i;
        }
    }
}

// Step 1 from zero moments: mhat = g and vhat = g^2, so the update is lr * g / (|g| + eps), about
// lr * sign(g), on top of the decay p * (1 - lr * wd).
TEST(AdamW, FirstStepIsSignedLearningRate) {
    HostTensor p = HostTensor::from_f32({3}, {1.0f, -2.0f, 0.5f});
    HostTensor g = HostTensor::from_f32({3}, {0.3f, -4.0f, 0.0f});
    HostTensor m({3}), v({3});
    AdamWParams a;
    a.lr = 0.1f;
    a.weight_decay = 0.5f;
    cpu::adamw_step(cpu::PooledExec{1}, p, g, m, v, a, Tensor(), Tensor());
    EXPECT_NEAR(p.f32()[0], 1.0 * 0.95 - 0.1, 1e-6);
    EXPECT_NEAR(p.f32()[1], -2.0 * 0.95 + 0.1, 1e-6);
    EXPECT_NEAR(p.f32()[2], 0.5 * 0.95, 1e-7);  // zero gradient: decay only
    // The betas are floats: 1 - 0.9f = 0.100000024, 1 - 0.999f = 0.000999987.
    EXPECT_NEAR(m.f32()[1], (1 - double(0.9f)) * -4.0, 1e-7);
    EXPECT_NEAR(v.f32()[1], (1 - double(0.999f)) * 16.0, 1e-9);
}

TEST(AdamW, BadArgumentsThrow) {
    const cpu::PooledExec ex{1};
    HostTensor p({4}), g({4}), m({4}), v({4}), g5({5});
    AdamWParams a;
    EXPECT_THROW(cpu::adamw_step(ex, p, g5, m, v, a, Tensor(), Tensor()), Error);
    a.step = 0;
    EXPECT_THROW(cpu::adamw_step(ex, p, g, m, v, a, Tensor(), Tensor()), Error);
    a.step = 1;
    a.beta2 = 1.0f;
    EXPECT_THROW(cpu::adamw_step(ex, p, g, m, v, a, Tensor(), Tensor()), Error);
    HostTensor pi({4}, DType::i32), out({1});
    EXPECT_THROW(cpu::sum_squares(ex, pi, out), Error);
}

TEST(SumSquares, MatchesDoubleSumAcrossChunks) {
    Rng rng(2);
    for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{4097}, int64_t{70001}}) {
        HostTensor t = random_tensor({n}, rng);
        double ref = 0;
        for (int64_t i = 0; i < n; ++i) ref += double(t.f32()[i]) * t.f32()[i];
        // Accumulated in double, stored as f32: float rounding of the result only.
        EXPECT_NEAR(sum_squares(cpu::PooledExec{2}, t), ref, 1e-7 * (ref + 1)) << n;
    }
}

TEST(AdamW, ThreadCountDoesNotChangeBits) {
    Rng rng(3);
    const int64_t n = 70001;
    HostTensor p1 = random_tensor({n}, rng), g = random_tensor({n}, rng);
    HostTensor p3 = p1.clone(), m1({n}), m3({n}), v1({n}), v3({n});
    AdamWParams a;
    a.weight_decay = 0.01f;
    for (int step = 1; step <= 2; ++step) {
        a.step = step;
        cpu::adamw_step(cpu::PooledExec{1}, p1, g, m1, v1, a, Tensor(), Tensor());
        cpu::adamw_step(cpu::PooledExec{3}, p3, g, m3, v3, a, Tensor(), Tensor());
    }
    EXPECT_EQ(std::memcmp(p1.f32(), p3.f32(), p1.nbytes()), 0);
    EXPECT_EQ(std::memcmp(m1.f32(), m3.f32(), m1.nbytes()), 0);
    EXPECT_EQ(std::memcmp(v1.f32(), v3.f32(), v1.nbytes()), 0);
    const float s1 = sum_squares(cpu::PooledExec{1}, g), s3 = sum_squares(cpu::PooledExec{3}, g);
    EXPECT_EQ(std::memcmp(&s1, &s3, sizeof(float)), 0);
}

// The clipping factor multiplies the gradient inside the step: the same bits as scaling the
// gradient first; the compute copy receives the updated weights.
TEST(AdamW, GradScaleAndValueCopy) {
    Rng rng(4);
    const int64_t n = 1001;
    HostTensor p1 = random_tensor({n}, rng), g = random_tensor({n}, rng);
    HostTensor p2 = p1.clone(), g2 = g.clone(), m1({n}), m2({n}), v1({n}), v2({n}), copy({n});
    const float factor = 0.3719f;
    for (int64_t i = 0; i < n; ++i) g2.f32()[i] *= factor;
    AdamWParams a;
    a.step = 1;
    const HostTensor scale = test::vec_tensor({factor});
    cpu::adamw_step(cpu::PooledExec{1}, p1, g, m1, v1, a, scale, copy);
    cpu::adamw_step(cpu::PooledExec{1}, p2, g2, m2, v2, a, Tensor(), Tensor());
    EXPECT_EQ(std::memcmp(p1.f32(), p2.f32(), p1.nbytes()), 0);
    EXPECT_EQ(std::memcmp(p1.f32(), copy.f32(), p1.nbytes()), 0);
}

// torch.nn.utils.clip_grad_norm_: max / (norm + 1e-6) above the limit, 1 at or below it or off.
TEST(ClipScale, FollowsTheTorchRule) {
    HostTensor norm_sq = test::vec_tensor({16.0f}), scale({1});
    cpu::clip_scale(cpu::PooledExec{1}, norm_sq, 2.0f, scale);
    EXPECT_FLOAT_EQ(scale.f32()[0], static_cast<float>(2.0 / (4.0 + 1e-6)));
    cpu::clip_scale(cpu::PooledExec{1}, norm_sq, 4.0f, scale);
    EXPECT_EQ(scale.f32()[0], 1.0f);
    cpu::clip_scale(cpu::PooledExec{1}, norm_sq, 0.0f, scale);
    EXPECT_EQ(scale.f32()[0], 1.0f);
}

}  // namespace
}  // namespace dflash

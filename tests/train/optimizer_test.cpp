// Optimiser pieces (src/train/optimizer.h, schedule.h, metrics.h): schedule values at known
// steps, AdamW against a hand-computed update, global-norm clipping, the implied acceptance length.
#include <gtest/gtest.h>

#include <cmath>

#include "model/tensor_layout.h"
#include "train/metrics.h"
#include "train/optimizer.h"
#include "train/schedule.h"

namespace dflash::train {
namespace {

TEST(Schedule, CosineWarmupThenDecayToZero) {
    const LrSchedule s(ScheduleKind::cosine, 1.0, 100, 0.1);
    EXPECT_EQ(s.warmup_steps(), 10);
    EXPECT_DOUBLE_EQ(s.lr(1), 0.1);
    EXPECT_DOUBLE_EQ(s.lr(5), 0.5);
    EXPECT_DOUBLE_EQ(s.lr(10), 1.0);
    EXPECT_DOUBLE_EQ(s.lr(11), 1.0);    // decay starts after the peak step
    EXPECT_NEAR(s.lr(56), 0.5, 1e-12);  // half-way through the 90 decay steps: cos(pi/2)
    EXPECT_GT(s.lr(100), 0.0);
    EXPECT_LT(s.lr(100), 1e-3);
    for (int64_t t = 11; t < 100; ++t) EXPECT_LE(s.lr(t + 1), s.lr(t));
}

TEST(Schedule, LinearAndConstant) {
    const LrSchedule lin(ScheduleKind::linear, 2.0, 10, 0.0);
    EXPECT_EQ(lin.warmup_steps(), 0);
    EXPECT_DOUBLE_EQ(lin.lr(1), 2.0);
    EXPECT_DOUBLE_EQ(lin.lr(6), 1.0);
    EXPECT_DOUBLE_EQ(lin.lr(10), 0.2);
    const LrSchedule c(ScheduleKind::constant, 3e-4, 50, 0.04);
    EXPECT_EQ(c.warmup_steps(), 2);
    EXPECT_DOUBLE_EQ(c.lr(1), 1.5e-4);
    EXPECT_DOUBLE_EQ(c.lr(2), 3e-4);
    EXPECT_DOUBLE_EQ(c.lr(50), 3e-4);
    EXPECT_THROW(parse_schedule_kind("step"), Error);
    EXPECT_THROW(LrSchedule(ScheduleKind::cosine, 1.0, 0, 0.1), Error);
}

ParamSet two_params() {
    ParamSet ps({TensorSpec{"a.weight", {2, 2}}, TensorSpec{"b.norm.weight", {3}}});
    ps.enable_grads();
    return ps;
}

TEST(Optimizer, AdamWMatchesHandComputedSteps) {
    auto be = make_cpu_backend(1);
    ParamSet ps = two_params();
    float* w = ps.params()[0].value.f32();
    float* g = ps.params()[0].grad.f32();
    for (int i = 0; i < 4; ++i) w[i] = 0.5f * static_cast<float>(i) - 1.0f;
    const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
    AdamW opt(ps, cfg);
    double m[4] = {}, v[4] = {}, ref[4];
    for (int i = 0; i < 4; ++i) ref[i] = w[i];
    const double lr = 0.01;
    for (int step = 1; step <= 3; ++step) {
        for (int i = 0; i < 4; ++i) g[i] = 0.3f * static_cast<float>(i + step) - 0.7f;
        opt.step(*be, ps, lr);
        for (int i = 0; i < 4; ++i) {
            m[i] = 0.9 * m[i] + 0.1 * g[i];
            v[i] = 0.95 * v[i] + 0.05 * g[i] * g[i];
            const double mh = m[i] / (1 - std::pow(0.9, step));
            const double vh = v[i] / (1 - std::pow(0.95, step));
            ref[i] -= lr * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * ref[i]);
        }
    }
    EXPECT_EQ(opt.steps_done(), 3);
    for (int i = 0; i < 4; ++i) {
        EXPECT_NEAR(w[i], ref[i], 1e-6) << i;
        EXPECT_NEAR(opt.m(0).f32()[i], m[i], 1e-6) << i;
    }
}

TEST(Optimizer, ClippingScalesToTheGlobalNorm) {
    auto be = make_cpu_backend(1);
    ParamSet ps = two_params();
    float* g0 = ps.params()[0].grad.f32();
    float* g1 = ps.params()[1].grad.f32();
    g0[0] = 3.0f;  // global norm over both tensors: sqrt(9 + 16) = 5
    g1[2] = 4.0f;
    const double norm = global_grad_norm(*be, ps);
    EXPECT_DOUBLE_EQ(norm, 5.0);
    EXPECT_DOUBLE_EQ(clip_grad_norm(*be, ps, norm, 10.0), 1.0);  // under the limit: untouched
    EXPECT_FLOAT_EQ(g0[0], 3.0f);
    EXPECT_DOUBLE_EQ(clip_grad_norm(*be, ps, norm, 0.0), 1.0);  // 0 = off
    const double f = clip_grad_norm(*be, ps, norm, 1.0);
    EXPECT_NEAR(f, 0.2, 1e-6);
    EXPECT_NEAR(global_grad_norm(*be, ps), 1.0, 1e-6);
    EXPECT_NEAR(g0[0] / g1[2], 0.75, 1e-6);  // direction kept
}

TEST(Metrics, ImpliedTauAndProgress) {
    EXPECT_DOUBLE_EQ(implied_tau({}), 1.0);
    EXPECT_DOUBLE_EQ(implied_tau({1.0, 1.0, 1.0}), 4.0);
    EXPECT_DOUBLE_EQ(implied_tau({0.5, 0.5}), 1.0 + 0.5 + 0.25);
    EXPECT_DOUBLE_EQ(implied_tau({0.0, 1.0}), 1.0);
    StepRecord r;
    r.step = 12;
    r.total_steps = 300;
    r.loss = 3.21;
    r.acc = {0.412};
    r.tokens_per_s = 1234;
    r.eta_s = 65;
    EXPECT_EQ(progress_line(r), "step 12/300 | loss 3.2100 | acc@1 0.412 | 1234 tok/s | ETA 1m05s");
    EXPECT_EQ(format_duration(3725), "1h02m");
    const auto j = record_json(r);
    for (const char* k :
         {"step", "epoch", "loss", "acc", "lr", "grad_norm", "tokens_per_s", "elapsed_s"})
        EXPECT_TRUE(j.contains(k)) << k;
    r.eval = true;
    EXPECT_TRUE(record_json(r)["eval"].get<bool>());
}

}  // namespace
}  // namespace dflash::train

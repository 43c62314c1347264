// Optimiser pieces (src/train/optimizer.h, schedule.h, metrics.h): schedule values at known
// steps, AdamW against a hand-computed update, global-norm clipping, the implied acceptance length.
#include <gtest/gtest.h>

#include <cmath>

#include "model/tensor_layout.h"
#include "support/test_util.h"
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

ParamSet two_params(Backend& be) {
    ParamSet ps(be, {TensorSpec{"a.weight", {2, 2}}, TensorSpec{"b.norm.weight", {3}}});
    ps.enable_training();
    return ps;
}

TEST(Optimizer, AdamWMatchesHandComputedSteps) {
    auto be = make_cpu_backend(1);
    ParamSet ps = two_params(*be);
    float* w = ps.params()[0].value.f32();
    float* g = ps.params()[0].grad.f32();
    for (int i = 0; i < 4; ++i) w[i] = 0.5f * static_cast<float>(i) - 1.0f;
    const AdamWConfig cfg{
        .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1, .muon = {}};
    AdamW opt(ps, cfg);
    double m[4] = {}, v[4] = {}, ref[4];
    for (int i = 0; i < 4; ++i) ref[i] = w[i];
    const double lr = 0.01;
    for (int step = 1; step <= 3; ++step) {
        for (int i = 0; i < 4; ++i) g[i] = 0.3f * static_cast<float>(i + step) - 0.7f;
        opt.step(*be, ps, lr, Tensor());
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
        EXPECT_NEAR(opt.m().f32()[i], m[i], 1e-6) << i;
    }
}

// The global norm spans every tensor; the clipping factor, computed on the device, scales the
// update as clipping the gradients would.
TEST(Optimizer, NormAndClippingSpanEveryTensor) {
    auto be = make_cpu_backend(1);
    ParamSet ps = two_params(*be);
    float* g0 = ps.params()[0].grad.f32();
    float* g1 = ps.params()[1].grad.f32();
    g0[0] = 3.0f;  // global norm over both tensors: sqrt(9 + 16) = 5
    g1[2] = 4.0f;
    HostTensor norm_sq({1}), scale({1});
    grad_norm_sq(*be, ps, norm_sq);
    EXPECT_FLOAT_EQ(norm_sq.f32()[0], 25.0f);
    be->clip_scale(norm_sq, 10.0f, scale);  // under the limit: untouched
    EXPECT_EQ(scale.f32()[0], 1.0f);
    be->clip_scale(norm_sq, 1.0f, scale);
    EXPECT_NEAR(scale.f32()[0], 0.2, 1e-6);
    // A step with the factor equals a step on gradients scaled by it.
    ParamSet ref = two_params(*be);
    ref.params()[0].grad.f32()[0] = 3.0f * scale.f32()[0];
    ref.params()[1].grad.f32()[2] = 4.0f * scale.f32()[0];
    AdamW a(ps, {}), b(ref, {});
    a.step(*be, ps, 0.1, scale);
    b.step(*be, ref, 0.1, Tensor());
    EXPECT_EQ(test::max_abs_diff(ps.flat_values(), ref.flat_values()), 0.0);
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

// DFlash2 records: the selector's metrics in the JSON (training and evaluation records alike) and
// its summary in the progress line.
TEST(Metrics, SelectorMetricsInRecordsAndProgress) {
    StepRecord r;
    r.step = 3;
    r.total_steps = 9;
    r.loss = 2.5;
    r.acc = {0.5};
    SelectorMetrics m;
    m.top_k = 16;
    m.alpha = 0.5;
    m.unary_loss = 2.0;
    m.selector_loss = 1.0;
    m.recall = 0.9;
    m.teacher_forced_acc = 0.75;
    m.path_accept_len = 2.5;
    m.oracle_accept_len = 3.25;
    m.path_acc = {0.75, 0.5};
    r.selector = m;
    EXPECT_EQ(progress_line(r),
              "step 3/9 | loss 2.5000 | acc@1 0.500 | sel 1.0000 recall@16 0.900 tf-acc 0.750 "
              "path 2.50 oracle 3.25 | 0 tok/s | ETA 0s");
    for (const bool eval : {false, true}) {
        r.eval = eval;
        const auto j = record_json(r);
        EXPECT_DOUBLE_EQ(j["unary_loss"].get<double>(), 2.0) << eval;
        EXPECT_DOUBLE_EQ(j["selector_loss"].get<double>(), 1.0);
        EXPECT_DOUBLE_EQ(j["selector_loss_alpha"].get<double>(), 0.5);
        EXPECT_EQ(j["selector_top_k"].get<int64_t>(), 16);
        EXPECT_DOUBLE_EQ(j["candidate_recall_at_k"].get<double>(), 0.9);
        EXPECT_DOUBLE_EQ(j["teacher_forced_selector_acc"].get<double>(), 0.75);
        EXPECT_DOUBLE_EQ(j["path_accept_len"].get<double>(), 2.5);
        EXPECT_DOUBLE_EQ(j["oracle_accept_len"].get<double>(), 3.25);
        EXPECT_EQ(j["path_acc"].size(), 2u);
    }
}

}  // namespace
}  // namespace dflash::train

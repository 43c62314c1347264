// block_loss (model/block_loss.h): every teacher kind on block rows equal to the teacher's gives
// exactly zero loss and gradient, KL is >= 0 otherwise and matches lm_head_kl on the gathered
// teacher rows, the ce kind matches lm_head_ce, a mix with ce equals the weighted sum of its
// parts, D-PACE weighting is CE with the detached dpace_weights of the rows' own CEs (and refuses
// kl), the teacher-row rule, the train.loss texts (good ones and the errors of bad ones), and the
// evaluation outputs (each row's argmax and TV distance from the teacher, whatever the loss).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/workspace.h"
#include "core/error.h"
#include "model/block_loss.h"
#include "support/test_util.h"
#include "support/tiny_models.h"

namespace dflash {
namespace {

struct Fixture {
    int64_t S = 11, R = 8, D = 6, V = 50, B = 4;
    HostTensor teacher_hidden, lm_head, labels, weights, teacher_rows;
    Fixture()
        : teacher_hidden({S, D}),
          lm_head({V, D}),
          labels({R}, DType::i32),
          weights({R}),
          teacher_rows({R}, DType::i32) {
        Rng rng(3);
        teacher_hidden = test::random_tensor({S, D}, rng);
        lm_head = test::random_tensor({V, D}, rng, 0.8f);
        for (int64_t r = 0; r < R; ++r) {
            const int64_t k = r % B;
            labels.i32()[r] = k == 0 ? -1 : static_cast<int32_t>(rng.below(V));
            weights.f32()[r] = k == 0 ? 0.0f : std::exp(-float(k - 1) / 4.0f);
            teacher_rows.i32()[r] = teacher_position(r / B * 5 + 1, k, S);
        }
    }
    BlockLossArgs args(const LossMix& loss, const Tensor& hf) const {
        BlockLossArgs a;
        a.loss = loss;
        a.hf = hf;
        a.lm_head = lm_head;
        a.labels = labels;
        a.weights = weights;
        a.teacher_hidden = teacher_hidden;
        a.teacher_rows = teacher_rows;
        a.grad_scale = 0.5f;
        a.chunk = 16;
        a.period = B;
        return a;
    }
};

test::StepStats run(Backend& be, const BlockLossArgs& a, const Tensor& dh) {
    Workspace ws = test::test_workspace(be);
    HostTensor stats({LossStatsLayout{a.period}.size()});
    block_loss(be, ws, a, dh, stats);
    return test::to_step_stats(stats, a.period);
}

TEST(BlockLoss, KlOfTheTeachersOwnRowsIsExactlyZero) {
    auto be = make_cpu_backend(1);
    const Fixture f;
    HostTensor hf({f.R, f.D});
    be->embedding_fwd(f.teacher_hidden, f.teacher_rows, hf);  // the draft equals the teacher
    HostTensor dh({f.R, f.D});
    fill_f32(dh, 3.0f);
    for (const char* loss : {"kl", "rkl", "jsd", "tv", "l1", "kl+0.5*rkl+2*jsd+tv+3*l1"}) {
        SCOPED_TRACE(loss);
        fill_f32(dh, 3.0f);
        const test::StepStats st = run(*be, f.args(parse_loss_mix(loss), hf), dh);
        EXPECT_EQ(st.loss_sum, 0.0);
        for (int64_t i = 0; i < dh.numel(); ++i) ASSERT_EQ(dh.f32()[i], 0.0f) << i;
        EXPECT_GT(st.weight_sum, 0.0);
    }
}

TEST(BlockLoss, KlIsPositiveAndEqualsLmHeadKlOnTheGatheredTeacherRows) {
    auto be = make_cpu_backend(1);
    const Fixture f;
    Rng rng(9);
    const HostTensor hf = test::random_tensor({f.R, f.D}, rng);
    HostTensor dh({f.R, f.D});
    const test::StepStats st = run(*be, f.args(LossKind::kl, hf), dh);
    HostTensor t({f.R, f.D}), loss({f.R}), dh_ref({f.R, f.D});
    be->embedding_fwd(f.teacher_hidden, f.teacher_rows, t);
    LmHeadKlOut out;
    out.loss_rows = loss;
    out.dh = dh_ref;
    be->lm_head_kl(hf, t, f.lm_head, f.weights, 0.5f, 16, LmHeadDivergences{}, out);
    double sum = 0;
    for (int64_t r = 0; r < f.R; ++r) {
        EXPECT_GE(loss.f32()[r], 0.0f) << r;
        sum += f.weights.f32()[r] * loss.f32()[r];
    }
    EXPECT_GT(st.loss_sum, 0.0);
    EXPECT_NEAR(st.loss_sum, sum, 1e-5 * sum);
    EXPECT_EQ(test::max_abs_diff(dh, dh_ref), 0.0);
}

// Evaluation's rows, against full logits on the host: argmax_out is each row's argmax and tv_out
// each weighted row's |q - p|_1 / 2, for a loss without a teacher term, one with, and D-PACE.
TEST(BlockLoss, EvaluationRowsAreTheArgmaxAndTheTvDistanceFromTheTeacher) {
    auto be = make_cpu_backend(1);
    const Fixture f;
    Rng rng(21);
    const HostTensor hf = test::random_tensor({f.R, f.D}, rng);
    HostTensor t({f.R, f.D});
    be->embedding_fwd(f.teacher_hidden, f.teacher_rows, t);
    const auto softmax_row = [&](const HostTensor& x, int64_t r) {
        std::vector<double> z(static_cast<size_t>(f.V));
        double mx = -1e300, sum = 0;
        for (int64_t v = 0; v < f.V; ++v) {
            double dot = 0;
            for (int64_t d = 0; d < f.D; ++d)
                dot += double(x.f32()[r * f.D + d]) * f.lm_head.f32()[v * f.D + d];
            z[static_cast<size_t>(v)] = dot;
            mx = std::max(mx, dot);
        }
        for (double& e : z) sum += (e = std::exp(e - mx));
        for (double& e : z) e /= sum;
        return z;
    };
    for (const char* loss : {"ce", "0.1*ce+0.9*l1", "dpace"}) {
        SCOPED_TRACE(loss);
        const bool dpace = std::string(loss) == "dpace";
        BlockLossArgs a = f.args(parse_loss_mix(dpace ? "ce" : loss), hf);
        if (dpace) a.dpace_alpha = 0.5f;
        HostTensor am({f.R}, DType::i32), tv({f.R});
        a.argmax_out = am;
        a.tv_out = tv;
        run(*be, a, Tensor());
        for (int64_t r = 0; r < f.R; ++r) {
            const auto q = softmax_row(hf, r);
            const auto p = softmax_row(t, r);
            EXPECT_EQ(am.i32()[r], std::max_element(q.begin(), q.end()) - q.begin()) << r;
            if (f.weights.f32()[r] == 0.0f) continue;
            double ref = 0;
            for (size_t v = 0; v < q.size(); ++v) ref += std::abs(q[v] - p[v]) / 2;
            EXPECT_NEAR(tv.f32()[r], ref, 1e-5) << r;
            EXPECT_GT(ref, 0.01) << r;  // a random draft: far enough from the teacher to matter
        }
    }
}

TEST(BlockLoss, CeEqualsLmHeadCe) {
    auto be = make_cpu_backend(1);
    const Fixture f;
    Rng rng(10);
    const HostTensor hf = test::random_tensor({f.R, f.D}, rng);
    HostTensor dh({f.R, f.D});
    BlockLossArgs a = f.args(LossKind::ce, hf);
    a.teacher_hidden = a.teacher_rows = Tensor();  // ce needs no teacher
    const test::StepStats st = run(*be, a, dh);
    HostTensor loss({f.R}), dh_ref({f.R, f.D});
    LmHeadCeOut out;
    out.loss_rows = loss;
    out.dh = dh_ref;
    be->lm_head_ce(hf, f.lm_head, f.labels, f.weights, 0.5f, 16, out);
    double sum = 0;
    for (int64_t r = 0; r < f.R; ++r) sum += f.weights.f32()[r] * loss.f32()[r];
    EXPECT_NEAR(st.loss_sum, sum, 1e-5 * sum);
    EXPECT_EQ(test::max_abs_diff(dh, dh_ref), 0.0);
}

// D-PACE: the loss sum and the gradient are those of CE weighted by dpace_weights of the rows'
// CEs, taken as constants; the weights given (the slot mask) only mark the trained rows.
TEST(BlockLoss, DpaceIsCeWeightedByTheDetachedDpaceWeights) {
    auto be = make_cpu_backend(1);
    Fixture f;
    HostTensor mask({f.R});
    for (int64_t r = 0; r < f.R; ++r) mask.f32()[r] = r % f.B == 0 || r == 6 ? 0.0f : 1.0f;
    for (int64_t r = 0; r < f.R; ++r) {
        if (mask.f32()[r] == 0.0f) f.labels.i32()[r] = -1;
        f.weights.f32()[r] = mask.f32()[r];
    }
    Rng rng(12);
    const HostTensor hf = test::random_tensor({f.R, f.D}, rng);
    HostTensor dh({f.R, f.D});
    BlockLossArgs a = f.args(LossKind::ce, hf);
    a.teacher_hidden = a.teacher_rows = Tensor();
    a.dpace_alpha = 0.4f;
    const test::StepStats st = run(*be, a, dh);

    HostTensor loss({f.R}), w({f.R}), dh_ref({f.R, f.D}), dh_mask({f.R, f.D});
    LmHeadCeOut fwd;
    fwd.loss_rows = loss;
    be->lm_head_ce(hf, f.lm_head, f.labels, mask, 1.0f, 16, fwd);
    be->dpace_weights(loss, mask, f.B, 0.4f, w);
    LmHeadCeOut out;
    out.dh = dh_ref;
    be->lm_head_ce(hf, f.lm_head, f.labels, w, 0.5f, 16, out);
    double sum = 0, wsum = 0;
    for (int64_t r = 0; r < f.R; ++r) {
        sum += w.f32()[r] * loss.f32()[r];
        wsum += w.f32()[r];
    }
    EXPECT_NEAR(st.loss_sum, sum, 1e-5 * sum);
    EXPECT_NEAR(st.weight_sum, wsum, 1e-5 * wsum);
    EXPECT_LT(test::max_abs_diff(dh, dh_ref), 1e-6);
    // ... which is not the mask-weighted CE's gradient: the weights matter.
    LmHeadCeOut plain;
    plain.dh = dh_mask;
    be->lm_head_ce(hf, f.lm_head, f.labels, mask, 0.5f, 16, plain);
    EXPECT_GT(test::max_abs_diff(dh, dh_mask), 1e-3);

    a.loss = LossKind::kl;
    a.teacher_hidden = f.teacher_hidden;
    a.teacher_rows = f.teacher_rows;
    EXPECT_THROW(run(*be, a, dh), Error);
}

// 0.1*ce+0.9*l1 (DSpark's mix): the loss sum and dh are 0.1 x ce's plus 0.9 x 2 x tv's.
TEST(BlockLoss, MixWithCeEqualsWeightedSumOfItsParts) {
    auto be = make_cpu_backend(1);
    const Fixture f;
    Rng rng(11);
    const HostTensor hf = test::random_tensor({f.R, f.D}, rng);
    HostTensor dh_mix({f.R, f.D}), dh_ce({f.R, f.D}), dh_tv({f.R, f.D});
    const test::StepStats mix = run(*be, f.args(parse_loss_mix("0.1*ce + 0.9*l1"), hf), dh_mix);
    const test::StepStats ce = run(*be, f.args(LossKind::ce, hf), dh_ce);
    const test::StepStats tv = run(*be, f.args(LossKind::tv, hf), dh_tv);
    EXPECT_GT(tv.loss_sum, 0.0);
    const double want = 0.1 * ce.loss_sum + 1.8 * tv.loss_sum;
    EXPECT_NEAR(mix.loss_sum, want, 1e-5 * want);
    EXPECT_EQ(mix.weight_sum, ce.weight_sum);
    double worst = 0, scale = 0;
    for (int64_t i = 0; i < dh_mix.numel(); ++i) {
        const double ref = 0.1 * dh_ce.f32()[i] + 1.8 * dh_tv.f32()[i];
        worst = std::max(worst, std::fabs(dh_mix.f32()[i] - ref));
        scale = std::max(scale, std::fabs(ref));
    }
    EXPECT_GT(scale, 0.0);
    EXPECT_LT(worst, 1e-6 * std::max(1.0, scale));
}

TEST(BlockLoss, LossTexts) {
    EXPECT_EQ(parse_loss_mix("kl").name(), "kl");
    EXPECT_EQ(parse_loss_mix("ce").name(), "ce");
    for (const char* k : {"rkl", "jsd", "tv", "l1"}) EXPECT_EQ(parse_loss_mix(k).name(), k);
    const LossMix dspark = parse_loss_mix(" 0.1 * ce + 0.9*l1 ");
    ASSERT_EQ(dspark.terms.size(), 2u);
    EXPECT_EQ(dspark.weight(LossKind::ce), 0.1);
    EXPECT_EQ(dspark.weight(LossKind::l1), 0.9);
    EXPECT_EQ(dspark.weight(LossKind::kl), 0.0);
    EXPECT_TRUE(dspark.needs_teacher());
    EXPECT_FALSE(parse_loss_mix("2*ce").needs_teacher());
    EXPECT_EQ(dspark.name(), "0.1*ce+0.9*l1");
    EXPECT_EQ(parse_loss_mix(dspark.name()).name(), dspark.name());
    // l1 is tv with twice the weight in the op's mix.
    const LmHeadDivergences d = parse_loss_mix("0.5*kl+0.25*tv+l1+3*jsd+rkl").divergences();
    EXPECT_EQ(d.kl, 0.5f);
    EXPECT_EQ(d.rkl, 1.0f);
    EXPECT_EQ(d.jsd, 3.0f);
    EXPECT_EQ(d.tv, 2.25f);
    for (const char* bad :
         {"mse", "", "ce+", "0*ce", "-1*kl", "x*kl", "ce+ce", "0.1*ce+0.9*L1", "inf*tv", "0.5*"}) {
        SCOPED_TRACE(bad);
        try {
            parse_loss_mix(bad);
            FAIL() << "expected an error";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("train.loss"), std::string::npos) << e.what();
        }
    }
}

TEST(BlockLoss, TeacherPositionAndNames) {
    // Block row k predicts token a + k: the target predicts it at a + k - 1.
    EXPECT_EQ(teacher_position(5, 1, 20), 5);
    EXPECT_EQ(teacher_position(5, 3, 20), 7);
    EXPECT_EQ(teacher_position(0, 0, 20), 0);    // the anchor row (weight 0): clamped
    EXPECT_EQ(teacher_position(18, 3, 20), 19);  // past the sequence (weight 0): clamped
    EXPECT_STREQ(loss_kind_name(LossKind::kl), "kl");
    EXPECT_STREQ(loss_kind_name(LossKind::l1), "l1");
    EXPECT_EQ(parse_loss_weighting("dpace"), LossWeighting::dpace);
    EXPECT_EQ(parse_loss_weighting("decay"), LossWeighting::decay);
    EXPECT_STREQ(loss_weighting_name(LossWeighting::dpace), "dpace");
    EXPECT_THROW(parse_loss_weighting("uniform"), Error);
}

}  // namespace
}  // namespace dflash

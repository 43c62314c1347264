// block_loss (model/block_loss.h): the kl kind on block rows equal to the teacher's gives exactly
// zero loss and gradient, KL is >= 0 otherwise and matches lm_head_kl on the gathered teacher rows,
// the ce kind matches lm_head_ce, D-PACE weighting is CE with the detached dpace_weights of the
// rows' own CEs (and refuses kl), the teacher-row rule, and the train.loss names.
#include <cmath>

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
    BlockLossArgs args(LossKind kind, const Tensor& hf) const {
        BlockLossArgs a;
        a.kind = kind;
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
    const test::StepStats st = run(*be, f.args(LossKind::kl, hf), dh);
    EXPECT_EQ(st.loss_sum, 0.0);
    for (int64_t i = 0; i < dh.numel(); ++i) ASSERT_EQ(dh.f32()[i], 0.0f) << i;
    EXPECT_GT(st.weight_sum, 0.0);
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
    be->lm_head_kl(hf, t, f.lm_head, f.weights, 0.5f, 16, out);
    double sum = 0;
    for (int64_t r = 0; r < f.R; ++r) {
        EXPECT_GE(loss.f32()[r], 0.0f) << r;
        sum += f.weights.f32()[r] * loss.f32()[r];
    }
    EXPECT_GT(st.loss_sum, 0.0);
    EXPECT_NEAR(st.loss_sum, sum, 1e-5 * sum);
    EXPECT_EQ(test::max_abs_diff(dh, dh_ref), 0.0);
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

    a.kind = LossKind::kl;
    a.teacher_hidden = f.teacher_hidden;
    a.teacher_rows = f.teacher_rows;
    EXPECT_THROW(run(*be, a, dh), Error);
}

TEST(BlockLoss, TeacherPositionAndNames) {
    // Block row k predicts token a + k: the target predicts it at a + k - 1.
    EXPECT_EQ(teacher_position(5, 1, 20), 5);
    EXPECT_EQ(teacher_position(5, 3, 20), 7);
    EXPECT_EQ(teacher_position(0, 0, 20), 0);    // the anchor row (weight 0): clamped
    EXPECT_EQ(teacher_position(18, 3, 20), 19);  // past the sequence (weight 0): clamped
    EXPECT_EQ(parse_loss_kind("kl"), LossKind::kl);
    EXPECT_EQ(parse_loss_kind("ce"), LossKind::ce);
    EXPECT_STREQ(loss_kind_name(LossKind::kl), "kl");
    EXPECT_THROW(parse_loss_kind("mse"), Error);
    EXPECT_EQ(parse_loss_weighting("dpace"), LossWeighting::dpace);
    EXPECT_EQ(parse_loss_weighting("decay"), LossWeighting::decay);
    EXPECT_STREQ(loss_weighting_name(LossWeighting::dpace), "dpace");
    EXPECT_THROW(parse_loss_weighting("uniform"), Error);
}

}  // namespace
}  // namespace dflash

// Muon (train.optimizer=muon; docs/training.md "Muon") and hidden-state noise
// (train.hidden_noise): which weights Muon takes; two Muon steps on small wide and tall matrices
// against a straightforward double-precision formula, AdamW still updating the rest; the
// Newton-Schulz iteration leaves every singular value in the quintic's band near 1; a run with
// Muon (and noise) resumed from a checkpoint has the bits of the uninterrupted run; 1 worker x 2
// micro-batches and 2 in-process workers x 1 give the same updates; with a sharded optimizer state
// (Note [Sharded Muon]) 2 and 4 workers update as unsharded, bit for bit through the host and to
// float rounding with the device-side collectives; noise changes training, deterministically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "support/test_util.h"
#include "train/checkpoint.h"
#include "train/drafter_training.h"
#include "train/optimizer.h"
#include "train_fixtures.h"

namespace dflash {
namespace {

using train::AdamW;
using train::AdamWConfig;
using train::MuonConfig;
using Matrix = std::vector<double>;  // row-major

// c [n, m] = a [n, k] · b [k, m]
Matrix matmul(const Matrix& a, const Matrix& b, int64_t n, int64_t k, int64_t m) {
    Matrix c(static_cast<size_t>(n * m), 0.0);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t t = 0; t < k; ++t)
            for (int64_t j = 0; j < m; ++j) c[i * m + j] += a[i * k + t] * b[t * m + j];
    return c;
}

Matrix transpose(const Matrix& a, int64_t n, int64_t m) {
    Matrix t(a.size());
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) t[j * n + i] = a[i * m + j];
    return t;
}

// The textbook Muon orthogonalisation of g [A, B]: X = g / (||g|| + eps), transposed when tall,
// 5 quintic steps X <- aX + (bG + cG²)X with G = XXᵀ, transposed back.
Matrix reference_ns(Matrix g, int64_t A, int64_t B, int steps, double eps) {
    double norm = 0;
    for (double v : g) norm += v * v;
    norm = std::sqrt(norm);
    for (double& v : g) v /= norm + eps;
    const bool tall = A > B;
    int64_t r = A, c = B;
    if (tall) {
        g = transpose(g, A, B);
        std::swap(r, c);
    }
    for (int s = 0; s < steps; ++s) {
        const Matrix G = matmul(g, transpose(g, r, c), r, c, r);
        const Matrix G2 = matmul(G, G, r, r, r);
        Matrix P(G.size());
        for (size_t i = 0; i < P.size(); ++i)
            P[i] = train::kMuonNsB * G[i] + train::kMuonNsC * G2[i];
        const Matrix PX = matmul(P, g, r, r, c);
        for (size_t i = 0; i < g.size(); ++i) g[i] = train::kMuonNsA * g[i] + PX[i];
    }
    return tall ? transpose(g, r, c) : g;
}

TEST(Muon, TakesTheTwoDimensionalWeightsOnly) {
    auto be = make_cpu_backend(1);
    ParamSet ps(*be, {{"layers.0.self_attn.q_proj.weight", {8, 6}},
                      {"fc.weight", {6, 12}},
                      {"layers.0.input_layernorm.weight", {6}},
                      {"embed_tokens.weight", {10, 6}},
                      {"lm_head.weight", {10, 6}},
                      {"confidence_head.proj.weight", {1, 6}}});
    std::vector<bool> picked;
    for (const Param& p : ps.params()) picked.push_back(train::muon_updates(p));
    EXPECT_EQ(picked, (std::vector<bool>{true, true, false, false, false, false}));
    EXPECT_NEAR(train::muon_lr_factor(train::MuonLrAdjust::match_rms_adamw, 8, 6),
                0.2 * std::sqrt(8.0), 1e-12);
    EXPECT_NEAR(train::muon_lr_factor(train::MuonLrAdjust::original, 8, 6), std::sqrt(8.0 / 6.0),
                1e-12);
    EXPECT_DOUBLE_EQ(train::muon_lr_factor(train::MuonLrAdjust::original, 6, 8), 1.0);
}

TEST(Muon, TwoStepsMatchTheFormula) {
    auto be = make_cpu_backend(1);
    // A wide and a tall weight, and a norm weight AdamW keeps.
    ParamSet ps(*be, {{"w.weight", {3, 5}}, {"t.weight", {6, 2}}, {"n.norm.weight", {4}}});
    ps.enable_training();
    Rng rng(5);
    std::vector<Matrix> w, mom;
    for (const Param& p : ps.params()) {
        Matrix v(static_cast<size_t>(p.shape.numel()));
        for (size_t i = 0; i < v.size(); ++i) {
            v[i] = rng.normal();
            p.value.f32()[i] = static_cast<float>(v[i]);
        }
        w.push_back(v);
        mom.emplace_back(v.size(), 0.0);
    }
    AdamWConfig cfg;
    cfg.weight_decay = 0.01;
    cfg.muon.enabled = true;
    cfg.muon.lr_ratio = 10;
    AdamW opt(ps, cfg);
    const double lr = 1e-3, muon_lr = 1e-2;
    Matrix norm_m(4, 0.0), norm_v(4, 0.0);
    for (int step = 1; step <= 2; ++step) {
        for (size_t q = 0; q < 3; ++q) {
            const Param& p = ps.params()[q];
            for (int64_t i = 0; i < p.shape.numel(); ++i)
                p.grad.f32()[i] = static_cast<float>(0.1 * rng.normal());
        }
        opt.step(*be, ps, lr, Tensor());
        for (size_t q = 0; q < 2; ++q) {
            const Param& p = ps.params()[q];
            const int64_t A = p.shape[0], B = p.shape[1];
            Matrix u(mom[q].size());
            for (size_t i = 0; i < u.size(); ++i) {
                const double g = p.grad.f32()[i];
                mom[q][i] = 0.95 * mom[q][i] + g;
                u[i] = g + 0.95 * mom[q][i];
            }
            const Matrix x = reference_ns(u, A, B, 5, 1e-7);
            const double adj = muon_lr * 0.2 * std::sqrt(static_cast<double>(std::max(A, B)));
            for (size_t i = 0; i < w[q].size(); ++i)
                w[q][i] = w[q][i] * (1 - muon_lr * 0.1) - adj * x[i];
            for (size_t i = 0; i < w[q].size(); ++i)
                EXPECT_NEAR(p.value.f32()[i], w[q][i], 2e-6) << p.name << " step " << step;
            for (size_t i = 0; i < w[q].size(); ++i)  // the momentum is kept in m
                EXPECT_NEAR(opt.m().f32()[p.offset + static_cast<int64_t>(i)], mom[q][i], 1e-6);
        }
        // AdamW on the norm weight, with its own lr and decay.
        const Param& n = ps.params()[2];
        for (int i = 0; i < 4; ++i) {
            const double g = n.grad.f32()[i];
            norm_m[i] = 0.9 * norm_m[i] + 0.1 * g;
            norm_v[i] = 0.95 * norm_v[i] + 0.05 * g * g;
            const double mh = norm_m[i] / (1 - std::pow(0.9, step));
            const double vh = norm_v[i] / (1 - std::pow(0.95, step));
            w[2][i] -= lr * (mh / (std::sqrt(vh) + 1e-8) + 0.01 * w[2][i]);
            EXPECT_NEAR(n.value.f32()[i], w[2][i], 1e-6) << "norm " << i;
        }
    }
}

// Singular values of x [A, B] (A <= B): square roots of the eigenvalues of x·xᵀ, by cyclic
// Jacobi rotations in double.
std::vector<double> singular_values(const Matrix& x, int64_t A, int64_t B) {
    Matrix g = matmul(x, transpose(x, A, B), A, B, A);
    for (int sweep = 0; sweep < 60; ++sweep) {
        for (int64_t p = 0; p < A; ++p) {
            for (int64_t q = p + 1; q < A; ++q) {
                const double apq = g[p * A + q];
                if (std::abs(apq) < 1e-300) continue;
                const double theta = (g[q * A + q] - g[p * A + p]) / (2 * apq);
                const double t =
                    (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
                const double c = 1 / std::sqrt(t * t + 1), s = t * c;
                for (int64_t k = 0; k < A; ++k) {  // rows p, q then columns p, q
                    const double gp = g[p * A + k], gq = g[q * A + k];
                    g[p * A + k] = c * gp - s * gq;
                    g[q * A + k] = s * gp + c * gq;
                }
                for (int64_t k = 0; k < A; ++k) {
                    const double gp = g[k * A + p], gq = g[k * A + q];
                    g[k * A + p] = c * gp - s * gq;
                    g[k * A + q] = s * gp + c * gq;
                }
            }
        }
    }
    std::vector<double> sv;
    for (int64_t i = 0; i < A; ++i) sv.push_back(std::sqrt(std::max(0.0, g[i * A + i])));
    return sv;
}

// The quintic (3.4445, -4.7750, 2.0315) is tuned for speed, not convergence: after 5 steps from
// a Frobenius-normalised matrix every singular value that started above ~0.01 sits in a band
// around 1 (about [0.7, 1.2]); rectangular Gaussian inputs (smallest singular value ~0.1 after
// the normalisation) are far from it before.
TEST(Muon, NewtonSchulzBringsEverySingularValueNearOne) {
    auto be = make_cpu_backend(1);
    for (const auto& [A, B] : {std::pair<int64_t, int64_t>{8, 20}, {20, 8}, {12, 30}}) {
        Rng rng(static_cast<uint64_t>(A * 100 + B));
        const int64_t n = A * B;
        HostTensor x({A, B});
        Matrix g(static_cast<size_t>(n));
        double norm = 0;
        for (int64_t i = 0; i < n; ++i) {
            g[i] = rng.normal();
            norm += g[i] * g[i];
        }
        for (int64_t i = 0; i < n; ++i) x.f32()[i] = static_cast<float>(g[i] / std::sqrt(norm));
        train::NsScratch s(*be, n, std::min(A, B) * std::min(A, B));
        Matrix in(x.f32(), x.f32() + n);
        train::newton_schulz(*be, x, 5, s);
        Matrix out(x.f32(), x.f32() + n);
        const Matrix ref = reference_ns(g, A, B, 5, 0.0);
        for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(out[i], ref[i], 2e-5) << A << "x" << B;
        const bool tall = A > B;
        const int64_t r = std::min(A, B), c = std::max(A, B);
        const std::vector<double> before = singular_values(tall ? transpose(in, A, B) : in, r, c);
        const std::vector<double> after = singular_values(tall ? transpose(out, A, B) : out, r, c);
        const auto [lo, hi] = std::minmax_element(after.begin(), after.end());
        EXPECT_GT(*lo, 0.65) << A << "x" << B;
        EXPECT_LT(*hi, 1.25) << A << "x" << B;
        EXPECT_LT(*std::min_element(before.begin(), before.end()), 0.3);  // far from it before
    }
}

using TrainRun = test::RecordedRun;
using KeyValues = std::vector<std::pair<std::string, std::string>>;

class MuonTraining : public test::SharedInputsTest<MuonTraining> {
  public:
    static constexpr const char* kTag = "dflash-muon";
    static void write_inputs(const std::filesystem::path& dir) {
        test::write_pattern_dataset(dir / "data", 24, 1);
        test::write_tiny_target(dir / "target");
    }

  protected:
    static TrainRun train(const std::string& out, KeyValues kv,
                          const std::filesystem::path& resume = {}) {
        kv.emplace_back("train.checkpoint_every", "3");
        kv.emplace_back("train.optimizer", "muon");
        return test::train_recorded(dir_->path(), out, kv, resume);
    }
};

TEST_F(MuonTraining, ResumeGivesTheBitsOfTheUninterruptedRun) {
    const KeyValues kv = {{"train.hidden_noise", "0.05"}};
    const TrainRun straight = train("straight", kv);
    ASSERT_EQ(straight.losses.size(), 6u);
    const TrainRun resumed =
        train("resumed", kv, straight.summary.run_dir / train::checkpoint_name(3));
    ASSERT_EQ(resumed.summary.first_step, 4);
    ASSERT_EQ(resumed.losses.size(), 3u);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(resumed.losses[i], straight.losses[i + 3]) << "step " << i + 4;
        EXPECT_EQ(resumed.grad_norms[i], straight.grad_norms[i + 3]) << "step " << i + 4;
    }
    test::expect_same_state(resumed.summary.model_dir, straight.summary.model_dir);
}

TEST_F(MuonTraining, TwoWorkersUpdateAsOneWorkerWithTwoMicroBatches) {
    const TrainRun one = train("w1a2", {{"train.accumulation", "2"}, {"train.grad_clip", "0"}});
    const TrainRun two = train("w2a1", {{"runtime.devices", "2"}, {"train.grad_clip", "0"}});
    ASSERT_EQ(one.losses.size(), two.losses.size());
    for (size_t i = 0; i < one.losses.size(); ++i) {
        EXPECT_NEAR(two.losses[i], one.losses[i], 1e-5 * std::abs(one.losses[i])) << i + 1;
        EXPECT_NEAR(two.grad_norms[i], one.grad_norms[i], 1e-5 * std::abs(one.grad_norms[i]))
            << i + 1;
    }
    const auto sa = test::read_state_tensors(one.summary.model_dir);
    const auto sb = test::read_state_tensors(two.summary.model_dir);
    EXPECT_LT(test::max_state_rel_diff(sa, sb, "master."), 1e-4);
    EXPECT_LT(test::max_state_rel_diff(sa, sb, "adam_m."), 1e-4);
}

// Sharded Muon: every matrix of the tiny drafter is cut by the chunks somewhere (and the last ones
// lie in the common tail), so each step needs the gather of the updates between its halves.
TEST_F(MuonTraining, ShardedStateUpdatesAsUnsharded) {
    for (const char* workers : {"2", "4"}) {
        SCOPED_TRACE(std::string("workers ") + workers);
        const TrainRun plain =
            train(std::string("plain-") + workers, {{"runtime.devices", workers}});
        const TrainRun sharded =
            train(std::string("sharded-") + workers,
                  {{"runtime.devices", workers}, {"train.shard_optimizer_state", "true"}});
        ASSERT_EQ(plain.losses.size(), 6u);
        EXPECT_EQ(sharded.losses, plain.losses);
        EXPECT_EQ(sharded.grad_norms, plain.grad_norms);
        test::expect_same_state(sharded.summary.model_dir, plain.summary.model_dir);
        // The device-side path (reduce-scatter, all-gathers inside the recorded update), which
        // sums in another order: equal to float rounding.
        const TrainRun device =
            train(std::string("device-") + workers, {{"runtime.devices", workers},
                                                     {"runtime.gradient_exchange", "device"},
                                                     {"train.shard_optimizer_state", "true"}});
        ASSERT_EQ(device.losses.size(), 6u);
        for (size_t i = 0; i < 6; ++i)
            EXPECT_NEAR(device.losses[i], plain.losses[i], 1e-5 * std::abs(plain.losses[i])) << i;
        const auto sa = test::read_state_tensors(plain.summary.model_dir);
        const auto sb = test::read_state_tensors(device.summary.model_dir);
        EXPECT_LT(test::max_state_rel_diff(sa, sb, "master."), 1e-4);
        EXPECT_LT(test::max_state_rel_diff(sa, sb, "adam_m."), 1e-3);
    }
}

// Noise changes what is trained on (the first step's loss already), and the same seed draws the
// same noise (two runs agree to the bit).
TEST_F(MuonTraining, HiddenNoiseChangesTrainingDeterministically) {
    const TrainRun plain = train("noise-0", {{"train.max_steps", "2"}});
    const TrainRun a = train("noise-a", {{"train.max_steps", "2"}, {"train.hidden_noise", "0.5"}});
    const TrainRun b = train("noise-b", {{"train.max_steps", "2"}, {"train.hidden_noise", "0.5"}});
    ASSERT_EQ(a.losses.size(), 2u);
    EXPECT_NE(a.losses[0], plain.losses[0]);
    EXPECT_EQ(a.losses, b.losses);
    EXPECT_EQ(a.grad_norms, b.grad_norms);
}

}  // namespace
}  // namespace dflash

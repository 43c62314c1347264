// rope_inv_freq (none / linear / llama3 scaling, with a hand-derived llama3 table) and
// cpu::rope_fwd/bwd (NeoX rotate-half) against naive formulas, finite differences of the backward,
// errors, thread-count independence and partial rotary (R < Dh: only the first R dims turn).
#include <cmath>
#include <cstring>
#include <numbers>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "support/finite_diff.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::random_tensor;

RopeConfig llama31_config() {
    RopeConfig cfg;
    cfg.theta = 500000.0;
    cfg.scaling.type = RopeScalingType::llama3;
    cfg.scaling.factor = 8.0;
    cfg.scaling.low_freq_factor = 1.0;
    cfg.scaling.high_freq_factor = 4.0;
    cfg.scaling.original_max_position = 8192;
    return cfg;
}

// inv_freq is computed in float32 (powf of a float exponent), so it is within a few ulp of the
// double value: 2e-6 relative.
TEST(RopeInvFreq, UnscaledMatchesDoubleFormula) {
    for (const double theta : {10000.0, 1000000.0}) {
        for (const int64_t dh : {2, 10, 80, 128}) {
            RopeConfig cfg;
            cfg.theta = theta;
            const auto inv = rope_inv_freq(cfg, dh);
            ASSERT_EQ(static_cast<int64_t>(inv.size()), dh / 2);
            for (int64_t i = 0; i < dh / 2; ++i) {
                const double ref = 1.0 / std::pow(theta, 2.0 * i / dh);
                EXPECT_NEAR(inv[i], ref, 2e-6 * ref) << "theta " << theta << " Dh " << dh;
            }
        }
    }
}

TEST(RopeInvFreq, LinearDividesByFactor) {
    RopeConfig cfg;
    const auto base = rope_inv_freq(cfg, 64);
    cfg.scaling.type = RopeScalingType::linear;
    cfg.scaling.factor = 4.0;
    const auto lin = rope_inv_freq(cfg, 64);
    for (size_t i = 0; i < base.size(); ++i) EXPECT_EQ(lin[i], base[i] / 4.0f) << i;
}

// Llama-3.1 rule with theta 500000, factor 8, low_freq_factor 1, high_freq_factor 4,
// original_max_position 8192, Dh 128. Derived by hand:
//   inv[i] = 500000^(-i/64) = exp(-13.122363 * i/64); wavelen = 2 pi / inv[i].
//   low_freq_wavelen = 8192 / 1 = 8192, high_freq_wavelen = 8192 / 4 = 2048.
//   wavelen < 2048  <=> i < 64 * ln(2048 / 2pi) / ln(500000) = 28.22  -> i <= 28 unchanged
//   wavelen > 8192  <=> i > 64 * ln(8192 / 2pi) / ln(500000) = 34.98  -> i >= 35 divided by 8
//   i = 0:  inv 1, wavelen 6.28                                   -> 1
//   i = 20: inv exp(-4.100738) = 0.0165604, wavelen 379.4        -> 0.0165604
//   i = 28: inv exp(-5.741034) = 0.00321145, wavelen 1956.5      -> 0.00321145
//   i = 29: inv exp(-5.946070) = 0.00261610, wavelen 2401.7: smooth = (8192/2401.7 - 1)/3
//           = 0.803620; (1 - 0.803620)/8 + 0.803620 = 0.828167   -> 0.00216657
//   i = 32: inv 1/sqrt(500000) = 0.00141421, wavelen 4442.9: smooth = (1.843869 - 1)/3
//           = 0.281290; 0.718710/8 + 0.281290 = 0.371129         -> 0.000524846
//   i = 35: inv exp(-7.176292) = 0.000764497, wavelen 8218.7 > 8192 -> 0.0000955621
//   i = 63: inv exp(-12.917326) = 2.45514e-6, wavelen 2.56e6      -> 3.06893e-7
// The hand values carry 6 significant digits: tolerance 1e-5 relative.
TEST(RopeInvFreq, Llama3MatchesHandDerivedTable) {
    const auto inv = rope_inv_freq(llama31_config(), 128);
    ASSERT_EQ(inv.size(), 64u);
    const std::vector<std::pair<int, double>> table = {
        {0, 1.0},          {20, 0.0165604},    {28, 0.00321145}, {29, 0.00216657},
        {32, 0.000524846}, {35, 0.0000955621}, {63, 3.06893e-7},
    };
    for (const auto& [i, ref] : table) EXPECT_NEAR(inv[i], ref, 1e-5 * ref) << "i=" << i;
}

// Every entry against the rule evaluated in double (no branch boundary lies within float
// rounding of an index here): 1e-5 relative.
TEST(RopeInvFreq, Llama3MatchesDoubleRule) {
    const auto inv = rope_inv_freq(llama31_config(), 128);
    for (int i = 0; i < 64; ++i) {
        const double f = 1.0 / std::pow(500000.0, i / 64.0);
        const double wavelen = 2 * std::numbers::pi / f;
        double ref = f;
        if (wavelen > 8192) {
            ref = f / 8;
        } else if (wavelen >= 2048) {
            const double smooth = (8192 / wavelen - 1) / 3;
            ref = (1 - smooth) * f / 8 + smooth * f;
        }
        EXPECT_NEAR(inv[i], ref, 1e-5 * ref) << "i=" << i;
    }
}

TEST(RopeInvFreq, BadConfigsThrow) {
    RopeConfig cfg;
    EXPECT_THROW(rope_inv_freq(cfg, 7), Error);
    EXPECT_THROW(rope_inv_freq(cfg, 0), Error);
    RopeConfig l3 = llama31_config();
    l3.scaling.high_freq_factor = 1.0;
    EXPECT_THROW(rope_inv_freq(l3, 64), Error);
    RopeConfig lin;
    lin.scaling.type = RopeScalingType::linear;
    lin.scaling.factor = 0.0;
    EXPECT_THROW(rope_inv_freq(lin, 64), Error);
}

// Naive rotation in double; the angle is the float32 product float(pos) * inv_freq[i] that HF
// computes (at position 1e5 its rounding alone is ~4e-3 rad, so a double angle would not be the
// reference the model was trained with).
HostTensor rope_ref(const Tensor& x, const std::vector<int32_t>& pos, const std::vector<float>& inv,
                    double sign = 1.0) {
    const int64_t s_len = x.dim(0), heads = x.dim(1), dh = x.dim(2);
    const auto half = static_cast<int64_t>(inv.size());
    HostTensor y = x.clone();  // dims past 2 * half (partial rotary) stay as they are
    for (int64_t s = 0; s < s_len; ++s)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < half; ++i) {
                const double angle = static_cast<float>(pos[s]) * inv[i];
                const double c = std::cos(angle), sn = sign * std::sin(angle);
                const float* v = x.f32() + (s * heads + h) * dh;
                float* o = y.f32() + (s * heads + h) * dh;
                o[i] = static_cast<float>(v[i] * c - v[i + half] * sn);
                o[i + half] = static_cast<float>(v[i + half] * c + v[i] * sn);
            }
    return y;
}

std::vector<int32_t> random_positions(int64_t s, Rng& rng) {
    std::vector<int32_t> p(s);
    for (auto& v : p) v = static_cast<int32_t>(rng.below(rng.below(2) ? 64 : 131072));
    return p;
}

TEST(Rope, ForwardMatchesNaiveRotation) {
    Rng rng(1);
    RopeConfig cfg;
    for (const Shape& xs : {Shape{1, 1, 2}, Shape{7, 3, 10}, Shape{13, 5, 6}, Shape{5, 2, 128}}) {
        const auto inv = rope_inv_freq(cfg, xs[2]);
        const auto pos = random_positions(xs[0], rng);
        HostTensor positions = HostTensor::from_i32({xs[0]}, pos);
        HostTensor x = random_tensor(xs, rng);
        HostTensor ref = rope_ref(x, pos, inv);
        cpu::rope_fwd(cpu::PooledExec{2}, x, positions, test::vec_tensor(inv));
        // float cos/sin (<1 ulp) and two float products: 1e-6 of the largest value.
        EXPECT_LT(test::max_rel_diff(x, ref), 1e-6) << xs.to_string();
    }
}

TEST(Rope, HandCheckedRotationAndIdentityAtPositionZero) {
    // Dh 2: inv_freq [1], so position 1 rotates (1, 0) by 1 rad to (cos 1, sin 1).
    HostTensor x = HostTensor::from_f32({2, 1, 2}, {1.0f, 0.0f, 0.3f, -0.7f});
    HostTensor positions = HostTensor::from_i32({2}, {1, 0});
    cpu::rope_fwd(cpu::PooledExec{1}, x, positions,
                  test::vec_tensor(rope_inv_freq(RopeConfig{}, 2)));
    EXPECT_NEAR(x.f32()[0], 0.5403023, 1e-7);
    EXPECT_NEAR(x.f32()[1], 0.8414710, 1e-7);
    EXPECT_EQ(x.f32()[2], 0.3f);  // position 0: cos 1, sin 0 exactly
    EXPECT_EQ(x.f32()[3], -0.7f);
}

// L(x) = sum(dy * rope(x)) is linear in x, so finite differences are exact up to round-off and
// the backward (rotation by -angle) must match to ~1e-6.
TEST(Rope, BackwardMatchesFiniteDifferencesAndInvertsForward) {
    Rng rng(2);
    const Shape xs{5, 3, 6};
    RopeConfig cfg = llama31_config();
    const auto inv = rope_inv_freq(cfg, 6);
    const auto pos = random_positions(5, rng);
    HostTensor positions = HostTensor::from_i32({5}, pos);
    HostTensor x = random_tensor(xs, rng), dy = random_tensor(xs, rng);
    HostTensor dx = dy.clone();
    cpu::rope_bwd(cpu::PooledExec{1}, dx, positions, test::vec_tensor(inv));

    auto loss = [&](const std::vector<double>& xv) {
        double l = 0;
        const int64_t half = 3;
        for (int64_t s = 0; s < 5; ++s)
            for (int64_t h = 0; h < 3; ++h)
                for (int64_t i = 0; i < half; ++i) {
                    const double angle = static_cast<float>(pos[s]) * inv[i];
                    const int64_t o = (s * 3 + h) * 6;
                    const double a = xv[o + i], b = xv[o + i + half];
                    l += dy.f32()[o + i] * (a * std::cos(angle) - b * std::sin(angle));
                    l += dy.f32()[o + i + half] * (b * std::cos(angle) + a * std::sin(angle));
                }
        return l;
    };
    const std::vector<double> xv(x.f32(), x.f32() + x.numel());
    const auto num = test::fd_gradient(loss, xv, 1e-2);
    const auto r = test::compare_gradients({dx.f32(), dx.f32() + dx.numel()}, num);
    EXPECT_LT(r.max_rel_err, 1e-6) << r.to_string();

    HostTensor y = x.clone();
    cpu::rope_fwd(cpu::PooledExec{1}, y, positions, test::vec_tensor(inv));
    cpu::rope_bwd(cpu::PooledExec{1}, y, positions, test::vec_tensor(inv));
    EXPECT_LT(test::max_rel_diff(y, x), 1e-6);
}

TEST(Rope, ShapeErrors) {
    const cpu::PooledExec ex{1};
    const auto inv = rope_inv_freq(RopeConfig{}, 8);
    HostTensor x({3, 2, 8}), pos({3}, DType::i32), pos2({2}, DType::i32), posf({3});
    HostTensor odd({3, 2, 7}), flat({3, 16});
    EXPECT_THROW(cpu::rope_fwd(ex, x, pos2, test::vec_tensor(inv)), Error);
    EXPECT_THROW(cpu::rope_fwd(ex, x, posf, test::vec_tensor(inv)), Error);
    EXPECT_THROW(cpu::rope_fwd(ex, odd, pos, test::vec_tensor(inv)), Error);
    EXPECT_THROW(cpu::rope_fwd(ex, flat, pos, test::vec_tensor(inv)), Error);
    EXPECT_THROW(cpu::rope_bwd(ex, x, pos, test::vec_tensor(rope_inv_freq(RopeConfig{}, 10))),
                 Error);
    EXPECT_THROW(cpu::rope_bwd(ex, x, pos, test::vec_tensor(std::vector<float>{})), Error);
}

// Partial rotary (Qwen3-Next / Qwen3.5: 64 of 256 dims): the frequencies of rope_inv_freq(cfg, R)
// turn pairs (i, i + R/2) of the first R dims; the other Dh - R dims keep their bits; the backward
// still inverts the forward.
TEST(Rope, PartialRotaryTurnsOnlyTheLeadingDims) {
    Rng rng(4);
    RopeConfig cfg;
    cfg.theta = 1e7;
    for (const auto& [xs, r] :
         {std::pair{Shape{9, 3, 32}, int64_t{8}}, {Shape{5, 2, 256}, 64}, {Shape{70, 4, 6}, 2}}) {
        const auto inv = rope_inv_freq(cfg, r);
        const auto pos = random_positions(xs[0], rng);
        HostTensor positions = HostTensor::from_i32({xs[0]}, pos);
        HostTensor x = random_tensor(xs, rng);
        HostTensor ref = rope_ref(x, pos, inv);
        HostTensor y = x.clone();
        cpu::rope_fwd(cpu::PooledExec{2}, y, positions, test::vec_tensor(inv));
        EXPECT_LT(test::max_rel_diff(y, ref), 1e-6) << xs.to_string();
        const int64_t dh = xs[2];
        for (int64_t row = 0; row < xs[0] * xs[1]; ++row)
            EXPECT_EQ(std::memcmp(y.f32() + row * dh + r, x.f32() + row * dh + r,
                                  sizeof(float) * (dh - r)),
                      0)
                << xs.to_string() << " row " << row;
        cpu::rope_bwd(cpu::PooledExec{2}, y, positions, test::vec_tensor(inv));
        EXPECT_LT(test::max_rel_diff(y, x), 1e-6) << xs.to_string();
    }
}

// 101 x 4 x 64 crosses the parallel threshold.
TEST(Rope, ThreadCountDoesNotChangeBits) {
    Rng rng(3);
    const Shape xs{101, 4, 64};
    const auto inv = rope_inv_freq(llama31_config(), 64);
    HostTensor positions = HostTensor::from_i32({101}, random_positions(101, rng));
    HostTensor x1 = random_tensor(xs, rng);
    HostTensor x3 = x1.clone();
    cpu::rope_fwd(cpu::PooledExec{1}, x1, positions, test::vec_tensor(inv));
    cpu::rope_fwd(cpu::PooledExec{3}, x3, positions, test::vec_tensor(inv));
    EXPECT_EQ(std::memcmp(x1.f32(), x3.f32(), x1.nbytes()), 0);
    cpu::rope_bwd(cpu::PooledExec{1}, x1, positions, test::vec_tensor(inv));
    cpu::rope_bwd(cpu::PooledExec{3}, x3, positions, test::vec_tensor(inv));
    EXPECT_EQ(std::memcmp(x1.f32(), x3.f32(), x1.nbytes()), 0);
}

}  // namespace
}  // namespace dflash

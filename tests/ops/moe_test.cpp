// cpu::moe_route and cpu::moe_experts (the mixture-of-experts reference): routing of both kinds
// against hand-worked rows (ties, normalize on and off, k == E), the experts against a naive
// double-precision loop per token (both activations, with and without biases, awkward sizes and
// more tokens than one of the op's blocks), row and thread-count invariance, and the argument
// errors. MXFP4 experts: the op on blocks and scales gives the bits of the op on the decoded
// weights, stays row invariant, and refuses mis-shaped blocks, scales and dimensions.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/mxfp4.h"
#include "support/test_util.h"

namespace dflash {
namespace {

struct Routed {
    HostTensor experts, weights;
};

Routed route(const std::vector<float>& logits, int64_t E, const MoeRouting& routing) {
    const auto R = static_cast<int64_t>(logits.size()) / E;
    Routed out{HostTensor({R, routing.k}, DType::i32), HostTensor({R, routing.k})};
    cpu::moe_route(cpu::PooledExec{2}, HostTensor::from_f32({R, E}, logits), routing, out.experts,
                   out.weights);
    return out;
}

// exp(a) / sum_i exp(b_i), in double.
double ratio(double a, const std::vector<double>& b) {
    double s = 0;
    for (const double v : b) s += std::exp(v);
    return std::exp(a) / s;
}

void expect_row(const Routed& got, int64_t r, const std::vector<int32_t>& ids,
                const std::vector<double>& weights) {
    const auto k = static_cast<int64_t>(ids.size());
    for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(got.experts.i32()[r * k + j], ids[j]) << "row " << r << " pick " << j;
        EXPECT_NEAR(got.weights.f32()[r * k + j], weights[j], 1e-6) << "row " << r << " pick " << j;
    }
}

TEST(MoeRoute, SoftmaxTopkWithTiesAndNormalization) {
    // Row 0: a tie between experts 1 and 2 (the lower id first). Row 1: all equal. Row 2: the
    // best expert last.
    const std::vector<float> logits = {1, 3, 3, 0, 2, 0, 0, 0, 0, 0, -1, 0.5f, -2, 0, 4};
    const std::vector<double> row0 = {1, 3, 3, 0, 2}, row2 = {-1, 0.5, -2, 0, 4};
    MoeRouting routing{MoeRouterKind::softmax_topk, 3, true};
    const Routed norm = route(logits, 5, routing);
    expect_row(norm, 0, {1, 2, 4}, {ratio(3, {3, 3, 2}), ratio(3, {3, 3, 2}), ratio(2, {3, 3, 2})});
    expect_row(norm, 1, {0, 1, 2}, {1.0 / 3, 1.0 / 3, 1.0 / 3});
    expect_row(norm, 2, {4, 1, 3},
               {ratio(4, {4, 0.5, 0}), ratio(0.5, {4, 0.5, 0}), ratio(0, {4, 0.5, 0})});
    routing.normalize = false;
    const Routed raw = route(logits, 5, routing);
    expect_row(raw, 0, {1, 2, 4}, {ratio(3, row0), ratio(3, row0), ratio(2, row0)});
    expect_row(raw, 1, {0, 1, 2}, {0.2, 0.2, 0.2});
    expect_row(raw, 2, {4, 1, 3}, {ratio(4, row2), ratio(0.5, row2), ratio(0, row2)});
}

TEST(MoeRoute, TopkSoftmaxOverThePicksOnly) {
    const std::vector<float> logits = {-1, 5, 2, 5, 4, 7, -3, 7.5f, 0, 1};
    const Routed got = route(logits, 5, {MoeRouterKind::topk_softmax, 3, true});
    expect_row(got, 0, {1, 3, 4}, {ratio(5, {5, 5, 4}), ratio(5, {5, 5, 4}), ratio(4, {5, 5, 4})});
    expect_row(got, 1, {2, 0, 4},
               {ratio(7.5, {7.5, 7, 1}), ratio(7, {7.5, 7, 1}), ratio(1, {7.5, 7, 1})});
    // normalize changes nothing here: the weights sum to 1 already.
    const Routed same = route(logits, 5, {MoeRouterKind::topk_softmax, 3, false});
    EXPECT_EQ(std::memcmp(same.weights.f32(), got.weights.f32(), got.weights.nbytes()), 0);
    // k == E: every expert, best first; k == 1: weight 1.
    const Routed all = route({0.5f, -1, 2}, 3, {MoeRouterKind::topk_softmax, 3, true});
    expect_row(all, 0, {2, 0, 1},
               {ratio(2, {2, 0.5, -1}), ratio(0.5, {2, 0.5, -1}), ratio(-1, {2, 0.5, -1})});
    const Routed one = route({0.5f, -1, 2}, 3, {MoeRouterKind::topk_softmax, 1, true});
    expect_row(one, 0, {2}, {1.0});
}

// ---- moe_experts ------------------------------------------------------------------------------

struct Case {
    int64_t R, E, k, D, I;
};

struct Problem {
    HostTensor x, experts, weights, gate_up, gate_up_bias, down, down_bias;
    MoeExperts w;
};

// Random inputs big enough that clamped_swiglu's clamps bite (pre-activations beyond +-7).
Problem make_problem(const Case& c, MoeActivation act, bool biases, uint64_t seed) {
    Rng rng(seed);
    Problem p;
    p.x = test::random_tensor({c.R, c.D}, rng, 2.0f);
    p.experts = HostTensor({c.R, c.k}, DType::i32);
    for (int64_t i = 0; i < p.experts.numel(); ++i)
        p.experts.i32()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.E)));
    p.weights = test::random_tensor({c.R, c.k}, rng, 0.5f);
    p.gate_up = test::random_tensor({c.E, 2 * c.I, c.D}, rng, 1.0f);
    p.down = test::random_tensor({c.E, c.D, c.I}, rng, 0.3f);
    if (biases) {
        p.gate_up_bias = test::random_tensor({c.E, 2 * c.I}, rng, 1.0f);
        p.down_bias = test::random_tensor({c.E, c.D}, rng, 1.0f);
    }
    p.w.gate_up = p.gate_up;
    p.w.gate_up_bias = p.gate_up_bias;
    p.w.down = p.down;
    p.w.down_bias = p.down_bias;
    p.w.activation = act;
    return p;
}

// The op's definition, one token and one pick at a time, in double.
std::vector<double> naive_experts(const Problem& p, const Case& c) {
    std::vector<double> out(static_cast<size_t>(c.R * c.D), 0.0);
    std::vector<double> a(static_cast<size_t>(c.I));
    const auto sig = [](double v) { return 1.0 / (1.0 + std::exp(-v)); };
    for (int64_t r = 0; r < c.R; ++r) {
        const float* x = p.x.f32() + r * c.D;
        for (int64_t j = 0; j < c.k; ++j) {
            const int64_t e = p.experts.i32()[r * c.k + j];
            const double wt = p.weights.f32()[r * c.k + j];
            for (int64_t i = 0; i < c.I; ++i) {
                double g = 0, u = 0;
                for (int64_t d = 0; d < c.D; ++d) {
                    g += double{p.gate_up.f32()[(e * 2 * c.I + i) * c.D + d]} * x[d];
                    u += double{p.gate_up.f32()[(e * 2 * c.I + c.I + i) * c.D + d]} * x[d];
                }
                if (!p.gate_up_bias.empty()) {
                    g += p.gate_up_bias.f32()[e * 2 * c.I + i];
                    u += p.gate_up_bias.f32()[e * 2 * c.I + c.I + i];
                }
                if (p.w.activation == MoeActivation::swiglu) {
                    a[i] = g * sig(g) * u;
                } else {
                    const double lim = p.w.limit;
                    g = std::min(g, lim);
                    u = std::clamp(u, -lim, lim);
                    a[i] = (u + 1) * g * sig(double{p.w.alpha} * g);
                }
            }
            for (int64_t d = 0; d < c.D; ++d) {
                double y = p.down_bias.empty() ? 0.0 : p.down_bias.f32()[e * c.D + d];
                for (int64_t i = 0; i < c.I; ++i)
                    y += double{p.down.f32()[(e * c.D + d) * c.I + i]} * a[i];
                out[static_cast<size_t>(r * c.D + d)] += wt * y;
            }
        }
    }
    return out;
}

HostTensor run_experts(const Problem& p, const cpu::Exec& ex) {
    HostTensor out({p.x.dim(0), p.x.dim(1)});
    fill_f32(out, 123.0f);  // overwritten, not accumulated
    cpu::moe_experts(ex, p.x, p.experts, p.weights, p.w, out);
    return out;
}

TEST(MoeExperts, MatchesNaiveLoop) {
    const cpu::PooledExec ex{3};
    int64_t cases = 0;
    // D and I off every kernel's tile; 131 tokens cross the op's 128-token blocks.
    for (const Case& c : {Case{1, 5, 1, 13, 7}, Case{7, 5, 2, 19, 11}, Case{37, 5, 3, 21, 9},
                          Case{131, 5, 2, 9, 5}, Case{4, 1, 1, 40, 33}}) {
        for (const MoeActivation act : {MoeActivation::swiglu, MoeActivation::clamped_swiglu}) {
            for (const bool biases : {false, true}) {
                const Problem p = make_problem(c, act, biases, static_cast<uint64_t>(++cases));
                const HostTensor out = run_experts(p, ex);
                const std::vector<double> ref = naive_experts(p, c);
                EXPECT_LT(test::max_rel_diff(out.f32(), ref), 2e-5)
                    << "R=" << c.R << " E=" << c.E << " k=" << c.k << " D=" << c.D << " I=" << c.I
                    << " act=" << static_cast<int>(act) << " biases=" << biases;
            }
        }
    }
}

// The clamps take effect: a gate far above the limit gives the same output as one at the limit,
// and an up far outside gives the same as the clamped one.
TEST(MoeExperts, ClampedSwigluClampsGateAndUp) {
    const Case c{1, 1, 1, 1, 1};
    Problem p = make_problem(c, MoeActivation::clamped_swiglu, false, 5);
    p.x.f32()[0] = 1.0f;
    p.weights.f32()[0] = 1.0f;
    p.down.f32()[0] = 1.0f;
    const auto out_for = [&](float g, float u) {
        p.gate_up.f32()[0] = g;
        p.gate_up.f32()[1] = u;
        return run_experts(p, cpu::PooledExec{1}).f32()[0];
    };
    const double lim = 7.0, alpha = 1.702;
    EXPECT_FLOAT_EQ(out_for(50, 100),
                    static_cast<float>((lim + 1) * lim / (1 + std::exp(-alpha * lim))));
    EXPECT_FLOAT_EQ(out_for(-3, -100),
                    static_cast<float>((1 - lim) * -3 / (1 + std::exp(3 * alpha))));
    EXPECT_EQ(out_for(50, 2), out_for(7, 2));
}

// A token's output has the same bits alone, among 36 others (its experts shared with varying
// numbers of rows) and with any thread count.
TEST(MoeExperts, RowAndThreadInvariant) {
    const Case c{37, 5, 3, 21, 9};
    const Problem p = make_problem(c, MoeActivation::swiglu, true, 77);
    const HostTensor all = run_experts(p, cpu::PooledExec{3});
    const HostTensor all1 = run_experts(p, cpu::PooledExec{1});
    EXPECT_EQ(std::memcmp(all.f32(), all1.f32(), all.nbytes()), 0);
    for (const int64_t t : {0, 17, 36}) {
        HostTensor out({1, c.D});
        cpu::moe_experts(cpu::PooledExec{2}, p.x.view().rows(t, t + 1),
                         p.experts.view().rows(t, t + 1), p.weights.view().rows(t, t + 1), p.w,
                         out);
        EXPECT_EQ(std::memcmp(out.f32(), all.f32() + t * c.D, out.nbytes()), 0) << "token " << t;
    }
}

TEST(MoeOps, ArgumentErrors) {
    const cpu::PooledExec ex{1};
    HostTensor logits({2, 4}), ids({2, 5}, DType::i32), wts({2, 5});
    EXPECT_TRUE(
        test::has(test::error_of([&] {
                      cpu::moe_route(ex, logits, {MoeRouterKind::softmax_topk, 5, true}, ids, wts);
                  }),
                  "k=5 is outside [1, E=4]"));
    HostTensor ids_f({2, 2}), wts2({2, 2});
    EXPECT_TRUE(test::has(
        test::error_of([&] {
            cpu::moe_route(ex, logits, {MoeRouterKind::softmax_topk, 2, true}, ids_f, wts2);
        }),
        "experts"));

    const Case c{3, 4, 2, 6, 5};
    Problem p = make_problem(c, MoeActivation::swiglu, true, 3);
    HostTensor out({c.R, c.D});
    const auto err = [&](const MoeExperts& w, const Tensor& o) {
        return test::error_of([&] { cpu::moe_experts(ex, p.x, p.experts, p.weights, w, o); });
    };
    EXPECT_EQ(err(p.w, out), "");
    HostTensor out_bad({c.R, c.D + 1});
    EXPECT_TRUE(test::has(err(p.w, out_bad), "out"));
    MoeExperts w = p.w;
    HostTensor odd({c.E, 2 * c.I - 1, c.D});
    w.gate_up = odd;
    EXPECT_TRUE(test::has(err(w, out), "gate_up"));
    w = p.w;
    HostTensor down_bad({c.E, c.D, c.I + 1});
    w.down = down_bad;
    EXPECT_TRUE(test::has(err(w, out), "down"));
    w = p.w;
    HostTensor bias_bad({c.E, c.I});
    w.gate_up_bias = bias_bad;
    EXPECT_TRUE(test::has(err(w, out), "gate_up_bias"));
    w = p.w;
    w.activation = MoeActivation::clamped_swiglu;
    w.limit = 0;
    EXPECT_TRUE(test::has(err(w, out), "limit"));
    p.experts.i32()[3] = static_cast<int32_t>(c.E);
    EXPECT_TRUE(test::has(err(p.w, out), "experts[1, 1] = 4 is outside [0, E=4)"));
}

// ---- MXFP4 experts ----------------------------------------------------------------------------

// Random MXFP4 experts and the same weights decoded to f32 (backend/mxfp4.h): the op must give
// the same bits from either.
struct Mxfp4Problem {
    Problem p;  // p.w holds the decoded f32 weights
    HostTensor gu_blocks, gu_scales, dn_blocks, dn_scales;
    MoeExperts mx;  // the same experts as blocks and scales
};

HostTensor random_bytes(Shape shape, Rng& rng, int lo, int hi) {
    HostTensor t(shape, DType::u8);
    for (int64_t i = 0; i < t.numel(); ++i)
        t.view().u8()[i] = static_cast<uint8_t>(lo + static_cast<int>(rng.below(hi - lo + 1)));
    return t;
}

HostTensor decoded(const HostTensor& blocks, const HostTensor& scales, Shape shape) {
    HostTensor out(shape);
    const int64_t groups = blocks.dim(2), rows = blocks.numel() / (groups * 16);
    decode_mxfp4({blocks.view().u8(), blocks.nbytes()}, {scales.view().u8(), scales.nbytes()}, rows,
                 groups, out.f32());
    return out;
}

Mxfp4Problem make_mxfp4_problem(const Case& c, MoeActivation act, bool biases, uint64_t seed) {
    Mxfp4Problem m;
    m.p = make_problem(c, act, biases, seed);
    Rng rng(seed + 1000);
    // Scales around 2^-4..2^-1 (so clamped_swiglu's clamps still bite), blocks any byte.
    m.gu_blocks = random_bytes({c.E, 2 * c.I, c.D / 32, 16}, rng, 0, 255);
    m.gu_scales = random_bytes({c.E, 2 * c.I, c.D / 32}, rng, 121, 126);
    m.dn_blocks = random_bytes({c.E, c.D, c.I / 32, 16}, rng, 0, 255);
    m.dn_scales = random_bytes({c.E, c.D, c.I / 32}, rng, 119, 124);
    m.p.gate_up = decoded(m.gu_blocks, m.gu_scales, {c.E, 2 * c.I, c.D});
    m.p.down = decoded(m.dn_blocks, m.dn_scales, {c.E, c.D, c.I});
    m.p.w.gate_up = m.p.gate_up;
    m.p.w.down = m.p.down;
    m.mx = m.p.w;
    m.mx.gate_up = Tensor();
    m.mx.down = Tensor();
    m.mx.gate_up_blocks = m.gu_blocks;
    m.mx.gate_up_scales = m.gu_scales;
    m.mx.down_blocks = m.dn_blocks;
    m.mx.down_scales = m.dn_scales;
    return m;
}

HostTensor run_mxfp4(const Mxfp4Problem& m, const cpu::Exec& ex) {
    HostTensor out({m.p.x.dim(0), m.p.x.dim(1)});
    fill_f32(out, 123.0f);
    cpu::moe_experts(ex, m.p.x, m.p.experts, m.p.weights, m.mx, out);
    return out;
}

TEST(MoeExpertsMxfp4, SameBitsAsDecodedWeights) {
    const cpu::PooledExec ex{3};
    uint64_t seed = 500;
    // D, I multiples of 32 (one or several groups, odd group counts), one expert or many, a token
    // block crossing the op's 128, k == E.
    for (const Case& c : {Case{1, 4, 2, 32, 32}, Case{9, 5, 3, 96, 64}, Case{131, 3, 2, 64, 96},
                          Case{5, 1, 1, 160, 32}, Case{6, 3, 3, 32, 160}}) {
        for (const MoeActivation act : {MoeActivation::swiglu, MoeActivation::clamped_swiglu}) {
            for (const bool biases : {false, true}) {
                const Mxfp4Problem m = make_mxfp4_problem(c, act, biases, ++seed);
                const HostTensor want = run_experts(m.p, ex);
                const HostTensor got = run_mxfp4(m, ex);
                EXPECT_EQ(std::memcmp(got.f32(), want.f32(), want.nbytes()), 0)
                    << "R=" << c.R << " E=" << c.E << " k=" << c.k << " D=" << c.D << " I=" << c.I
                    << " act=" << static_cast<int>(act) << " biases=" << biases;
                // And the decoded weights are what the op's definition multiplies.
                EXPECT_LT(test::max_rel_diff(got.f32(), naive_experts(m.p, c)), 2e-5);
            }
        }
    }
}

TEST(MoeExpertsMxfp4, RowAndThreadInvariant) {
    const Case c{37, 5, 3, 64, 32};
    const Mxfp4Problem m = make_mxfp4_problem(c, MoeActivation::clamped_swiglu, true, 91);
    const HostTensor all = run_mxfp4(m, cpu::PooledExec{3});
    const HostTensor all1 = run_mxfp4(m, cpu::PooledExec{1});
    EXPECT_EQ(std::memcmp(all.f32(), all1.f32(), all.nbytes()), 0);
    for (const int64_t t : {0, 17, 36}) {
        HostTensor out({1, c.D});
        cpu::moe_experts(cpu::PooledExec{2}, m.p.x.view().rows(t, t + 1),
                         m.p.experts.view().rows(t, t + 1), m.p.weights.view().rows(t, t + 1), m.mx,
                         out);
        EXPECT_EQ(std::memcmp(out.f32(), all.f32() + t * c.D, out.nbytes()), 0) << "token " << t;
    }
}

TEST(MoeExpertsMxfp4, ArgumentErrors) {
    const cpu::PooledExec ex{1};
    const Case c{3, 4, 2, 64, 32};
    const Mxfp4Problem m = make_mxfp4_problem(c, MoeActivation::clamped_swiglu, true, 7);
    HostTensor out({c.R, c.D});
    const auto err = [&](const MoeExperts& w) {
        return test::error_of(
            [&] { cpu::moe_experts(ex, m.p.x, m.p.experts, m.p.weights, w, out); });
    };
    EXPECT_EQ(err(m.mx), "");
    MoeExperts w = m.mx;
    w.gate_up = m.p.gate_up;  // both forms
    EXPECT_TRUE(test::has(err(w), "give one form"));
    w = m.mx;
    HostTensor short_scales({c.E, 2 * c.I, c.D / 32 - 1}, DType::u8);
    w.gate_up_scales = short_scales;
    EXPECT_TRUE(test::has(err(w), "gate_up_scales is u8[4, 64, 1]@cpu; expected u8 [4, 64, 2]"));
    w = m.mx;
    HostTensor down_blocks_f32({c.E, c.D, c.I / 32, 16});
    w.down_blocks = down_blocks_f32;
    EXPECT_TRUE(test::has(err(w), "down_blocks is f32"));
    w = m.mx;
    w.down_scales = Tensor();
    EXPECT_TRUE(test::has(err(w), "down_scales"));
    w = m.mx;
    w.gate_up_blocks = Tensor();  // scales without blocks: neither form is whole
    w.gate_up = m.p.gate_up;
    w.down = m.p.down;
    EXPECT_TRUE(test::has(err(w), "without gate_up_blocks"));
    // D not a multiple of 32: blocks of 2 groups for D = 48 do not describe it.
    HostTensor x48({c.R, 48}), out48({c.R, 48});
    const std::string e48 =
        test::error_of([&] { cpu::moe_experts(ex, x48, m.p.experts, m.p.weights, m.mx, out48); });
    EXPECT_TRUE(test::has(e48, "multiples of 32")) << e48;
}

}  // namespace
}  // namespace dflash

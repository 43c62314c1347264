// cpu::gdn_* (the Gated DeltaNet reference): the conv against a naive loop, with a state equal to
// the same conv over [history ; x] from zeros, and its cache roll (advance by n, then convolve =
// one conv over the longer sequence); gdn_prepare and gdn_gated_norm against the formulas on
// awkward sizes; the recurrence against a double-precision loop written in the other form
// (S <- a (I - b k k^T) S + b k v^T); gdn_recurrent with a count against the first n tokens alone;
// gdn_chunked against gdn_recurrent (T across chunk boundaries, r = 1, 2, 3, random states) and
// split at an awkward boundary against one call; both rules against transformers' own
// (tests/fixtures/gdn, tools/reference/hybrid_fixture.py); and every shape check. Forward only:
// these ops have no backward.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "core/safetensors.h"
#include "support/test_util.h"

namespace dflash {
namespace {

HostTensor count_tensor(int32_t n) {
    return HostTensor::from_i32({1}, {n});
}

// ---- conv ---------------------------------------------------------------------------------------

// The op's formula in double: y[t, c] = silu(sum_j w[c, j] u[t - K + 1 + j, c]), u = [state ; x].
std::vector<double> naive_conv(const HostTensor& x, const HostTensor& w, const HostTensor& state) {
    const int64_t S = x.dim(0), C = x.dim(1), K = w.dim(1);
    std::vector<double> y(static_cast<size_t>(S * C));
    for (int64_t t = 0; t < S; ++t)
        for (int64_t c = 0; c < C; ++c) {
            double acc = 0;
            for (int64_t j = 0; j < K; ++j) {
                const int64_t src = t - K + 1 + j;
                const double u =
                    src < 0 ? state.f32()[(src + K - 1) * C + c] : x.f32()[src * C + c];
                acc += static_cast<double>(w.f32()[c * K + j]) * u;
            }
            y[static_cast<size_t>(t * C + c)] = acc / (1 + std::exp(-acc));
        }
    return y;
}

HostTensor conv(const HostTensor& x, const HostTensor& w, const HostTensor& state) {
    HostTensor y({x.dim(0), x.dim(1)});
    cpu::gdn_conv(cpu::PooledExec{3}, x, w, state, y);
    return y;
}

// Rows [r0, r1) of a [R, C] tensor, copied.
HostTensor row_copy(const HostTensor& t, int64_t r0, int64_t r1) {
    const int64_t C = t.dim(1);
    HostTensor out({r1 - r0, C});
    std::copy_n(t.f32() + r0 * C, (r1 - r0) * C, out.f32());
    return out;
}

// [a ; b] along rows.
HostTensor stack(const HostTensor& a, const HostTensor& b) {
    HostTensor out({a.dim(0) + b.dim(0), a.dim(1)});
    std::copy_n(a.f32(), a.numel(), out.f32());
    std::copy_n(b.f32(), b.numel(), out.f32() + a.numel());
    return out;
}

TEST(GdnConv, MatchesTheFormulaAndAStateIsTheHistory) {
    for (const int64_t K : {2, 4}) {
        const int64_t S = 11, C = 13;
        Rng rng(10 + static_cast<uint64_t>(K));
        const HostTensor hist = test::random_tensor({K - 1, C}, rng);
        const HostTensor x = test::random_tensor({S, C}, rng);
        const HostTensor w = test::random_tensor({C, K}, rng, 0.7f);
        const HostTensor y = conv(x, w, hist);
        EXPECT_LT(test::max_rel_diff(y.f32(), naive_conv(x, w, hist)), 1e-6) << "K=" << K;
        // The same conv over [hist ; x] from a zero state: its last S rows are y.
        const HostTensor full = conv(stack(hist, x), w, HostTensor({K - 1, C}));
        EXPECT_EQ(test::max_abs_diff(y, row_copy(full, K - 1, K - 1 + S)), 0.0) << "K=" << K;
    }
}

TEST(GdnConv, AdvanceThenConvEqualsTheLongerConv) {
    const int64_t K = 4, C = 7, S1 = 6, S2 = 5;
    Rng rng(3);
    const HostTensor state0 = test::random_tensor({K - 1, C}, rng);
    const HostTensor x1 = test::random_tensor({S1, C}, rng);
    const HostTensor x2 = test::random_tensor({S2, C}, rng);
    const HostTensor w = test::random_tensor({C, K}, rng);
    // count past S is clamped to S, a negative count to 0.
    for (const int32_t count : {0, 1, 2, 3, 4, 6, 9, -2}) {
        const int64_t n = std::clamp<int64_t>(count, 0, S1);
        HostTensor state = state0.clone();
        cpu::gdn_conv_advance(cpu::PooledExec{3}, state, x1, count_tensor(count));
        // The state is the last K-1 rows of [state0 ; x1[:n]].
        const HostTensor window = stack(state0, row_copy(x1, 0, n));
        EXPECT_EQ(test::max_abs_diff(state, row_copy(window, n, n + K - 1)), 0.0)
            << "count=" << count;
        const HostTensor y = conv(x2, w, state);
        const HostTensor longer = conv(stack(row_copy(x1, 0, n), x2), w, state0);
        EXPECT_EQ(test::max_abs_diff(y, row_copy(longer, n, n + S2)), 0.0) << "count=" << count;
    }
}

// ---- prepare and the gated norm
// -------------------------------------------------------------------

struct Dims {
    int64_t S, Hk, dk, Hv, dv;
    int64_t C() const { return 2 * Hk * dk + Hv * dv; }
};

// The recurrence's inputs, made by gdn_prepare from random projections; a_log spreads the decays
// from long memories (exp(g) near 1) to short ones.
struct RuleInputs {
    HostTensor q, k, v, g, beta;
};

RuleInputs make_inputs(const Dims& d, uint64_t seed) {
    Rng rng(seed);
    const HostTensor conv_out = test::random_tensor({d.S, d.C()}, rng);
    const HostTensor b = test::random_tensor({d.S, d.Hv}, rng);
    const HostTensor a = test::random_tensor({d.S, d.Hv}, rng);
    HostTensor a_log({d.Hv}), dt_bias = test::random_tensor({d.Hv}, rng, 0.1f);
    for (int64_t h = 0; h < d.Hv; ++h)
        a_log.f32()[h] = -4.0f + 4.5f * static_cast<float>(h) / static_cast<float>(d.Hv);
    RuleInputs in{HostTensor({d.S, d.Hk, d.dk}), HostTensor({d.S, d.Hk, d.dk}),
                  HostTensor({d.S, d.Hv, d.dv}), HostTensor({d.S, d.Hv}), HostTensor({d.S, d.Hv})};
    cpu::gdn_prepare(cpu::PooledExec{3}, conv_out, b, a, a_log, dt_bias, in.q, in.k, in.v, in.g,
                     in.beta);
    return in;
}

TEST(GdnPrepare, MatchesTheFormulas) {
    const Dims d{9, 3, 5, 6, 7};
    Rng rng(4);
    const HostTensor conv_out = test::random_tensor({d.S, d.C()}, rng, 2.0f);
    HostTensor b = test::random_tensor({d.S, d.Hv}, rng, 3.0f);
    HostTensor a = test::random_tensor({d.S, d.Hv}, rng, 3.0f);
    a.f32()[0] = 25.0f;  // softplus's linear branch
    const HostTensor a_log = test::random_tensor({d.Hv}, rng);
    const HostTensor dt_bias = test::random_tensor({d.Hv}, rng);
    HostTensor q({d.S, d.Hk, d.dk}), k({d.S, d.Hk, d.dk}), v({d.S, d.Hv, d.dv}), g({d.S, d.Hv}),
        beta({d.S, d.Hv});
    cpu::gdn_prepare(cpu::PooledExec{3}, conv_out, b, a, a_log, dt_bias, q, k, v, g, beta);
    std::vector<double> wq, wk, wv, wg, wb;
    for (int64_t t = 0; t < d.S; ++t) {
        const float* row = conv_out.f32() + t * d.C();
        for (int part = 0; part < 2; ++part)
            for (int64_t h = 0; h < d.Hk; ++h) {
                const float* x = row + part * d.Hk * d.dk + h * d.dk;
                double ss = 0;
                for (int64_t c = 0; c < d.dk; ++c) ss += static_cast<double>(x[c]) * x[c];
                const double scale = (part == 0 ? 1 / std::sqrt(static_cast<double>(d.dk)) : 1.0) /
                                     std::sqrt(ss + 1e-6);
                for (int64_t c = 0; c < d.dk; ++c) (part == 0 ? wq : wk).push_back(x[c] * scale);
            }
        for (int64_t c = 0; c < d.Hv * d.dv; ++c) wv.push_back(row[2 * d.Hk * d.dk + c]);
        for (int64_t h = 0; h < d.Hv; ++h) {
            const double x = static_cast<double>(a.f32()[t * d.Hv + h]) + dt_bias.f32()[h];
            const double sp = x > 20 ? x : std::log1p(std::exp(x));
            wg.push_back(-std::exp(static_cast<double>(a_log.f32()[h])) * sp);
            wb.push_back(1 / (1 + std::exp(-static_cast<double>(b.f32()[t * d.Hv + h]))));
        }
    }
    EXPECT_LT(test::max_rel_diff(q.f32(), wq), 1e-6);
    EXPECT_LT(test::max_rel_diff(k.f32(), wk), 1e-6);
    EXPECT_EQ(test::max_rel_diff(v.f32(), wv), 0.0);
    EXPECT_LT(test::max_rel_diff(g.f32(), wg), 1e-6);
    EXPECT_LT(test::max_rel_diff(beta.f32(), wb), 1e-6);
}

TEST(GdnGatedNorm, MatchesTheFormula) {
    const int64_t S = 5, Hv = 3, dv = 11;
    const float eps = 1e-6f;
    Rng rng(5);
    const HostTensor o = test::random_tensor({S, Hv, dv}, rng, 3.0f);
    const HostTensor z = test::random_tensor({S, Hv * dv}, rng, 2.0f);
    const HostTensor w = test::random_tensor({dv}, rng);
    HostTensor y({S, Hv * dv});
    cpu::gdn_gated_norm(cpu::PooledExec{3}, o, z, w, eps, y);
    std::vector<double> want;
    for (int64_t r = 0; r < S * Hv; ++r) {
        double ss = 0;
        for (int64_t c = 0; c < dv; ++c)
            ss += static_cast<double>(o.f32()[r * dv + c]) * o.f32()[r * dv + c];
        const double inv = 1 / std::sqrt(ss / static_cast<double>(dv) + eps);
        for (int64_t c = 0; c < dv; ++c) {
            const double zz = z.f32()[r * dv + c];
            want.push_back(o.f32()[r * dv + c] * inv * w.f32()[c] * zz / (1 + std::exp(-zz)));
        }
    }
    EXPECT_LT(test::max_rel_diff(y.f32(), want), 2e-6);
}

// ---- the delta rule
// ----------------------------------------------------------------------------------

struct RuleOut {
    HostTensor state, o;
};

RuleOut run_recurrent(const RuleInputs& in, const HostTensor& state0, const Tensor& count = {}) {
    RuleOut r{state0.clone(), HostTensor({in.v.dim(0), in.v.dim(1), in.v.dim(2)})};
    cpu::gdn_recurrent(cpu::PooledExec{3}, in.q, in.k, in.v, in.g, in.beta, r.state, r.o, count);
    return r;
}

RuleOut run_chunked(const RuleInputs& in, const HostTensor& state0) {
    RuleOut r{state0.clone(), HostTensor({in.v.dim(0), in.v.dim(1), in.v.dim(2)})};
    cpu::gdn_chunked(cpu::PooledExec{3}, in.q, in.k, in.v, in.g, in.beta, r.state, r.o);
    return r;
}

// The rule in its other form, in double: S <- exp(g) (I - beta k k^T) S + beta k v^T, o = S^T q.
RuleOut naive_rule(const RuleInputs& in, const HostTensor& state0) {
    const int64_t S = in.v.dim(0), Hv = in.v.dim(1), dv = in.v.dim(2), Hk = in.q.dim(1),
                  dk = in.q.dim(2);
    std::vector<double> st = test::to_double(state0), o(static_cast<size_t>(S * Hv * dv)), kts(dv);
    for (int64_t t = 0; t < S; ++t)
        for (int64_t h = 0; h < Hv; ++h) {
            double* s = st.data() + h * dk * dv;
            const float* k = in.k.f32() + (t * Hk + h / (Hv / Hk)) * dk;
            const float* q = in.q.f32() + (t * Hk + h / (Hv / Hk)) * dk;
            const float* v = in.v.f32() + (t * Hv + h) * dv;
            const double a = std::exp(static_cast<double>(in.g.f32()[t * Hv + h]));
            const double b = in.beta.f32()[t * Hv + h];
            for (int64_t c = 0; c < dv; ++c) {  // kts = k^T S
                kts[static_cast<size_t>(c)] = 0;
                for (int64_t i = 0; i < dk; ++i)
                    kts[static_cast<size_t>(c)] += k[i] * s[i * dv + c];
            }
            for (int64_t i = 0; i < dk; ++i)
                for (int64_t c = 0; c < dv; ++c)
                    s[i * dv + c] = a * (s[i * dv + c] - b * k[i] * kts[static_cast<size_t>(c)]) +
                                    b * k[i] * v[c];
            for (int64_t c = 0; c < dv; ++c) {
                double acc = 0;
                for (int64_t i = 0; i < dk; ++i) acc += s[i * dv + c] * q[i];
                o[static_cast<size_t>((t * Hv + h) * dv + c)] = acc;
            }
        }
    RuleOut r{HostTensor(state0.shape()), HostTensor({S, Hv, dv})};
    for (size_t i = 0; i < st.size(); ++i) r.state.f32()[i] = static_cast<float>(st[i]);
    for (size_t i = 0; i < o.size(); ++i) r.o.f32()[i] = static_cast<float>(o[i]);
    return r;
}

TEST(GdnRecurrent, MatchesTheOtherFormInDouble) {
    const Dims d{37, 2, 6, 6, 5};
    const RuleInputs in = make_inputs(d, 6);
    Rng rng(7);
    const HostTensor state0 = test::random_tensor({d.Hv, d.dk, d.dv}, rng, 0.5f);
    const RuleOut got = run_recurrent(in, state0), want = naive_rule(in, state0);
    EXPECT_LT(test::max_rel_diff(got.o, want.o), 2e-6);
    EXPECT_LT(test::max_rel_diff(got.state, want.state), 2e-6);
}

TEST(GdnRecurrent, ACountAppliesTheFirstTokensOnly) {
    const Dims d{9, 1, 8, 2, 6};
    const RuleInputs in = make_inputs(d, 8);
    Rng rng(9);
    const HostTensor state0 = test::random_tensor({d.Hv, d.dk, d.dv}, rng, 0.5f);
    for (const int32_t count : {0, 1, 4, 9, 12, -1}) {
        const int64_t n = std::clamp<int64_t>(count, 0, d.S);
        RuleOut got{state0.clone(), HostTensor({d.S, d.Hv, d.dv})};
        fill_f32(got.o, 1234.5f);
        cpu::gdn_recurrent(cpu::PooledExec{3}, in.q, in.k, in.v, in.g, in.beta, got.state, got.o,
                           count_tensor(count));
        // The first n tokens alone, through a rule of n tokens.
        RuleInputs first{HostTensor({n, d.Hk, d.dk}), HostTensor({n, d.Hk, d.dk}),
                         HostTensor({n, d.Hv, d.dv}), HostTensor({n, d.Hv}), HostTensor({n, d.Hv})};
        std::copy_n(in.q.f32(), first.q.numel(), first.q.f32());
        std::copy_n(in.k.f32(), first.k.numel(), first.k.f32());
        std::copy_n(in.v.f32(), first.v.numel(), first.v.f32());
        std::copy_n(in.g.f32(), first.g.numel(), first.g.f32());
        std::copy_n(in.beta.f32(), first.beta.numel(), first.beta.f32());
        const RuleOut want = run_recurrent(first, state0);
        EXPECT_EQ(test::max_abs_diff(got.state, want.state), 0.0) << "count=" << count;
        const int64_t row = d.Hv * d.dv;
        for (int64_t i = 0; i < n * row; ++i)
            ASSERT_EQ(got.o.f32()[i], want.o.f32()[i]) << "count=" << count << " element " << i;
        for (int64_t i = n * row; i < d.S * row; ++i)
            ASSERT_EQ(got.o.f32()[i], 1234.5f) << "count=" << count << ": o row past n written";
        // o may be empty: the state alone (a replay).
        HostTensor state = state0.clone();
        cpu::gdn_recurrent(cpu::PooledExec{3}, in.q, in.k, in.v, in.g, in.beta, state, Tensor{},
                           count_tensor(count));
        EXPECT_EQ(test::max_abs_diff(state, want.state), 0.0) << "count=" << count;
    }
}

TEST(GdnChunked, EqualsTheRecurrence) {
    for (const int64_t T : {1, 63, 64, 65, 130, 200})
        for (const int64_t r : {1, 2, 3}) {
            const Dims d{T, 2, 16, 2 * r, 12};
            const RuleInputs in = make_inputs(d, 100 + static_cast<uint64_t>(T * 4 + r));
            Rng rng(static_cast<uint64_t>(T + r));
            const HostTensor state0 = test::random_tensor({d.Hv, d.dk, d.dv}, rng, 0.5f);
            const RuleOut chunked = run_chunked(in, state0), rec = run_recurrent(in, state0);
            EXPECT_LT(test::max_rel_diff(chunked.o, rec.o), 5e-6) << "T=" << T << " r=" << r;
            EXPECT_LT(test::max_rel_diff(chunked.state, rec.state), 5e-6)
                << "T=" << T << " r=" << r;
        }
}

// Tokens [t0, t1) of the rule's inputs, copied.
RuleInputs slice(const RuleInputs& in, int64_t t0, int64_t t1) {
    const auto part = [&](const HostTensor& t) {
        std::vector<int64_t> dims = t.shape().to_vector();
        const int64_t row = t.numel() / dims[0];
        dims[0] = t1 - t0;
        HostTensor out{Shape(dims)};
        std::copy_n(t.f32() + t0 * row, (t1 - t0) * row, out.f32());
        return out;
    };
    return {part(in.q), part(in.k), part(in.v), part(in.g), part(in.beta)};
}

TEST(GdnChunked, TwoCallsCarryTheState) {
    const Dims d{150, 1, 12, 3, 10};
    const RuleInputs in = make_inputs(d, 11);
    Rng rng(12);
    const HostTensor state0 = test::random_tensor({d.Hv, d.dk, d.dv}, rng, 0.5f);
    const RuleOut whole = run_chunked(in, state0);
    const int64_t cut = 37;  // not a chunk boundary: the second call's chunks are shifted
    const RuleOut first = run_chunked(slice(in, 0, cut), state0);
    const RuleOut second = run_chunked(slice(in, cut, d.S), first.state);
    EXPECT_LT(test::max_rel_diff(second.state, whole.state), 5e-6);
    HostTensor o({d.S, d.Hv, d.dv});
    std::copy_n(first.o.f32(), first.o.numel(), o.f32());
    std::copy_n(second.o.f32(), second.o.numel(), o.f32() + first.o.numel());
    EXPECT_LT(test::max_rel_diff(o, whole.o), 5e-6);
}

// transformers' own torch_recurrent_gated_delta_rule on the fixture's cases (made by
// tools/reference/hybrid_fixture.py, which checked it against transformers' chunked rule).
TEST(GdnRule, MatchesTransformers) {
    const auto f =
        SafetensorsFile::open(DFLASH_SOURCE_DIR "/tests/fixtures/gdn/gdn_cases.safetensors");
    const int cases = std::stoi(f.metadata().at("cases"));
    const int64_t Hk = std::stoll(f.metadata().at("Hk"));
    ASSERT_EQ(cases, 5);
    for (int i = 0; i < cases; ++i) {
        const std::string p = "case" + std::to_string(i) + ".";
        const HostTensor conv_out = f.read_f32(p + "conv_out"), b = f.read_f32(p + "b"),
                         a = f.read_f32(p + "a"), a_log = f.read_f32(p + "a_log"),
                         dt_bias = f.read_f32(p + "dt_bias"),
                         state0 = f.read_f32(p + "initial_state"), want_o = f.read_f32(p + "o"),
                         want_state = f.read_f32(p + "final_state");
        const int64_t S = conv_out.dim(0), Hv = state0.dim(0), dk = state0.dim(1),
                      dv = state0.dim(2);
        ASSERT_EQ(conv_out.dim(1), 2 * Hk * dk + Hv * dv);
        RuleInputs in{HostTensor({S, Hk, dk}), HostTensor({S, Hk, dk}), HostTensor({S, Hv, dv}),
                      HostTensor({S, Hv}), HostTensor({S, Hv})};
        cpu::gdn_prepare(cpu::PooledExec{3}, conv_out, b, a, a_log, dt_bias, in.q, in.k, in.v, in.g,
                         in.beta);
        const RuleOut rec = run_recurrent(in, state0), chunked = run_chunked(in, state0);
        EXPECT_LT(test::max_rel_diff(rec.o, want_o), 5e-6) << p << " recurrent, S=" << S;
        EXPECT_LT(test::max_rel_diff(rec.state, want_state), 5e-6) << p << " recurrent";
        EXPECT_LT(test::max_rel_diff(chunked.o, want_o), 5e-6) << p << " chunked, S=" << S;
        EXPECT_LT(test::max_rel_diff(chunked.state, want_state), 5e-6) << p << " chunked";
    }
}

// ---- shape checks
// --------------------------------------------------------------------------------

TEST(GdnShapes, BadShapesAreRejectedClearly) {
    const auto err = [](const std::function<void()>& fn) { return test::error_of(fn); };
    const HostTensor x({5, 6}), w({6, 4}), state({3, 6}), y({5, 6});
    EXPECT_TRUE(test::has(err([&] {
                              cpu::gdn_conv(cpu::PooledExec{3}, x, w, HostTensor({4, 6}), y);
                          }),
                          "gdn_conv: state is f32[4, 6]@cpu; expected f32 [3, 6]"));
    EXPECT_TRUE(test::has(err([&] {
                              cpu::gdn_conv(cpu::PooledExec{3}, x, HostTensor({6, 1}), state, y);
                          }),
                          "gdn_conv: w is"));
    EXPECT_TRUE(test::has(err([&] {
                              cpu::gdn_conv(cpu::PooledExec{3}, x, w, state, HostTensor({4, 6}));
                          }),
                          "gdn_conv: y is"));
    EXPECT_TRUE(test::has(
        err([&] {
            cpu::gdn_conv_advance(cpu::PooledExec{3}, state, HostTensor({5, 7}), count_tensor(1));
        }),
        "gdn_conv_advance: x is"));
    EXPECT_TRUE(test::has(
        err([&] {
            cpu::gdn_conv_advance(cpu::PooledExec{3}, state, x, HostTensor::from_i32({2}, {1, 2}));
        }),
        "gdn_conv_advance: count is"));

    const Dims d{4, 2, 8, 4, 6};
    HostTensor conv_out({d.S, d.C()}), b({d.S, d.Hv}), a({d.S, d.Hv}), a_log({d.Hv}),
        dt_bias({d.Hv}), q({d.S, d.Hk, d.dk}), k({d.S, d.Hk, d.dk}), v({d.S, d.Hv, d.dv}),
        g({d.S, d.Hv}), beta({d.S, d.Hv});
    EXPECT_TRUE(test::has(err([&] {
                              cpu::gdn_prepare(cpu::PooledExec{3}, HostTensor({d.S, d.C() + 1}), b,
                                               a, a_log, dt_bias, q, k, v, g, beta);
                          }),
                          "gdn_prepare: conv_out is f32[4, 57]@cpu; expected [S=4, 2*Hk*dk + "
                          "Hv*dv = 56]"));
    EXPECT_TRUE(test::has(err([&] {
                              cpu::gdn_prepare(cpu::PooledExec{3}, conv_out, b, a, a_log, dt_bias,
                                               q, k, HostTensor({d.S, 3, d.dv}), g, beta);
                          }),
                          "is not a multiple of Hk=2"));
    EXPECT_TRUE(test::has(err([&] {
                              cpu::gdn_prepare(cpu::PooledExec{3}, conv_out, b, a, HostTensor({3}),
                                               dt_bias, q, k, v, g, beta);
                          }),
                          "gdn_prepare: a_log is"));

    HostTensor st({d.Hv, d.dk, d.dv}), o({d.S, d.Hv, d.dv});
    EXPECT_TRUE(test::has(err([&] {
                              cpu::gdn_chunked(cpu::PooledExec{3}, q, k, v, g, beta,
                                               HostTensor({d.Hv, d.dv, d.dk}), o);
                          }),
                          "gdn_chunked: state is f32[4, 6, 8]@cpu; expected f32 [4, 8, 6]"));
    EXPECT_TRUE(test::has(
        err([&] { cpu::gdn_chunked(cpu::PooledExec{3}, q, k, v, g, beta, st, Tensor{}); }),
        "gdn_chunked: o is"));
    EXPECT_TRUE(test::has(err([&] {
                              cpu::gdn_recurrent(cpu::PooledExec{3}, q, k, v,
                                                 HostTensor({d.S + 1, d.Hv}), beta, st, o,
                                                 Tensor{});
                          }),
                          "gdn_recurrent: g is"));
    EXPECT_TRUE(test::has(err([&] {
                              cpu::gdn_recurrent(cpu::PooledExec{3}, q, k, v, g, beta, st, o,
                                                 HostTensor({1}));
                          }),
                          "gdn_recurrent: count is f32[1]@cpu; expected i32 [1]"));

    const HostTensor on({3, 2, 5}), z({3, 10}), nw({5}), ny({3, 10});
    EXPECT_TRUE(test::has(
        err([&] { cpu::gdn_gated_norm(cpu::PooledExec{3}, on, z, HostTensor({10}), 1e-6f, ny); }),
        "gdn_gated_norm: w is f32[10]@cpu; expected f32 [5]"));
    EXPECT_TRUE(
        test::has(err([&] { cpu::gdn_gated_norm(cpu::PooledExec{3}, on, z, nw, 0.0f, ny); }),
                  "gdn_gated_norm: eps=0 must be > 0"));
}

}  // namespace
}  // namespace dflash

// cpu::attention_fwd / attention_bwd against a dense double-precision reference that builds the
// [Sq, Sk] visibility mask explicitly from the mask's definition (ops.h, docs/training.md "The
// drafter's training forward"), sliding windows (drafter windows on dflash_block too) and per-head
// sink logits included. Tolerances: fp32
// forward vs double reference 2e-5 (relative to max(1, |ref|)); backward vs central finite
// differences of the double reference 1e-4 (the FD error itself is ~1e-9, so the tolerance only
// covers fp32 rounding in the op).

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::max_rel_diff;
using test::random_tensor;
using test::to_double;

struct Dims {
    int64_t sq, sk, h, hkv, dh;
};

// The mask by its definition, one bool per (query, key). Over a cache (kv_len) only keys
// j < kv_len exist and causal query i sits at position kv_len - Sq + i.
std::vector<char> dense_mask(const AttnMask& m, const Dims& d) {
    std::vector<char> vis(static_cast<size_t>(d.sq * d.sk), 0);
    const int64_t len = m.kv_len.empty() ? d.sk : m.kv_len.i32()[0];
    const int64_t q_offset = m.kv_len.empty() ? m.q_offset : len - d.sq;
    for (int64_t i = 0; i < d.sq; ++i) {
        for (int64_t j = 0; j < len; ++j) {
            bool ok = false;
            if (m.kind == AttnMaskKind::full) {
                ok = true;
            } else if (m.kind == AttnMaskKind::causal) {
                const int64_t pos = q_offset + i;
                ok = j <= pos && (m.window == 0 || j > pos - m.window);
            } else {
                const int64_t n = i / m.block_size;
                const int64_t anchor = m.anchors.i32()[n];
                if (anchor >= 0) {
                    const int64_t start = m.ctx_start.empty() ? 0 : m.ctx_start.i32()[n];
                    // Absolute positions: the query at anchor + slot, a block key at anchor +
                    // its slot, a context key at its row.
                    const int64_t qpos = anchor + i % m.block_size;
                    const int64_t kpos =
                        j < m.ctx_len ? j : anchor + (j - m.ctx_len) % m.block_size;
                    ok = j < m.ctx_len ? j >= start && j < anchor
                                       : (j - m.ctx_len) / m.block_size == n;
                    if (m.window > 0) ok = ok && std::abs(qpos - kpos) < m.window;
                    if (m.causal_block) ok = ok && kpos <= qpos;
                }
            }
            vis[i * d.sk + j] = ok;
        }
    }
    return vis;
}

struct RefResult {
    std::vector<double> out;  // [Sq, H, Dh]
    std::vector<double> lse;  // [H, Sq]
};

// With sinks (one logit s_h per head, or empty) the naive formula p_ij = exp(x_ij - M) /
// (sum_j exp(x_ij - M) + exp(s_h - M)), M the max over {x_i., s_h}; lse = M + log(that sum).
RefResult ref_attention(const std::vector<double>& q, const std::vector<double>& k,
                        const std::vector<double>& v, const std::vector<char>& vis, const Dims& d,
                        const std::vector<double>& sinks = {}) {
    RefResult r{std::vector<double>(d.sq * d.h * d.dh, 0.0), std::vector<double>(d.h * d.sq)};
    const double scale = 1.0 / std::sqrt(double(d.dh));
    std::vector<double> s(d.sk);
    for (int64_t h = 0; h < d.h; ++h) {
        const int64_t hk = h / (d.h / d.hkv);
        for (int64_t i = 0; i < d.sq; ++i) {
            double m = -INFINITY;
            for (int64_t j = 0; j < d.sk; ++j) {
                double dot = 0;
                for (int64_t c = 0; c < d.dh; ++c) {
                    dot += q[(i * d.h + h) * d.dh + c] * k[(j * d.hkv + hk) * d.dh + c];
                }
                s[j] = vis[i * d.sk + j] ? dot * scale : -INFINITY;
                m = std::max(m, s[j]);
            }
            const double sink = sinks.empty() ? -INFINITY : sinks[h];
            m = std::max(m, sink);
            if (m == -INFINITY) {
                r.lse[h * d.sq + i] = -INFINITY;
                continue;
            }
            double sum = std::exp(sink - m);
            for (int64_t j = 0; j < d.sk; ++j) sum += std::exp(s[j] - m);
            r.lse[h * d.sq + i] = m + std::log(sum);
            for (int64_t j = 0; j < d.sk; ++j) {
                const double p = std::exp(s[j] - m) / sum;
                for (int64_t c = 0; c < d.dh; ++c) {
                    r.out[(i * d.h + h) * d.dh + c] += p * v[(j * d.hkv + hk) * d.dh + c];
                }
            }
        }
    }
    return r;
}

struct Problem {
    Dims d;
    AttnMask mask;
    HostTensor q, k, v;
};

Problem make_problem(const Dims& d, const AttnMask& mask, uint64_t seed) {
    Rng rng(seed);
    Problem p{d, mask, random_tensor({d.sq, d.h, d.dh}, rng),
              random_tensor({d.sk, d.hkv, d.dh}, rng), random_tensor({d.sk, d.hkv, d.dh}, rng)};
    return p;
}

struct FwdResult {
    HostTensor out, lse;
};

FwdResult run_fwd(const Problem& p, int threads = 1) {
    FwdResult r{HostTensor({p.d.sq, p.d.h, p.d.dh}), HostTensor({p.d.h, p.d.sq})};
    cpu::attention_fwd(cpu::PooledExec{threads}, p.q, p.k, p.v, p.mask, r.out, r.lse);
    return r;
}

// Forward output and lse of the op against the dense reference.
void expect_matches_reference(const Problem& p, const std::string& what) {
    SCOPED_TRACE(what);
    const FwdResult got = run_fwd(p);
    const std::vector<double> sinks =
        p.mask.sinks.empty() ? std::vector<double>() : to_double(p.mask.sinks);
    const RefResult ref = ref_attention(to_double(p.q), to_double(p.k), to_double(p.v),
                                        dense_mask(p.mask, p.d), p.d, sinks);
    EXPECT_LT(max_rel_diff(got.out.f32(), ref.out), 2e-5);
    for (int64_t i = 0; i < p.d.h * p.d.sq; ++i) {
        if (std::isinf(ref.lse[i])) {
            EXPECT_EQ(got.lse.f32()[i], -INFINITY) << "lse " << i;
        } else {
            EXPECT_NEAR(got.lse.f32()[i], ref.lse[i], 2e-5 * std::max(1.0, std::fabs(ref.lse[i])))
                << "lse " << i;
        }
    }
}

const Dims kHeadConfigs[] = {{0, 0, 4, 2, 8}, {0, 0, 3, 1, 12}, {0, 0, 6, 6, 8}};

TEST(AttentionForward, CausalMatchesDenseReference) {
    uint64_t seed = 1;
    for (const Dims& hc : kHeadConfigs) {
        for (int64_t sq : {1, 7, 13}) {
            for (int64_t q_offset : {0, 5}) {
                for (int64_t extra_keys : {0, 3}) {  // keys past the last query are never seen
                    const Dims d{sq, q_offset + sq + extra_keys, hc.h, hc.hkv, hc.dh};
                    expect_matches_reference(
                        make_problem(d, AttnMask::causal(q_offset), seed++),
                        fmt::format("sq={} q_offset={} sk={} h={} hkv={} dh={}", sq, q_offset, d.sk,
                                    d.h, d.hkv, d.dh));
                }
            }
        }
    }
    // Several query chunks of 128 rows: the per-row limit must be applied inside each chunk.
    expect_matches_reference(make_problem({150, 155, 4, 2, 12}, AttnMask::causal(5), 99),
                             "multi-chunk");
}

TEST(AttentionForward, FullMatchesDenseReference) {
    uint64_t seed = 100;
    for (const Dims& hc : kHeadConfigs) {
        for (int64_t sq : {1, 7, 13}) {
            for (int64_t sk : {1, 9, 40}) {
                const Dims d{sq, sk, hc.h, hc.hkv, hc.dh};
                expect_matches_reference(
                    make_problem(d, AttnMask::full(), seed++),
                    fmt::format("sq={} sk={} h={} hkv={} dh={}", sq, sk, d.h, d.hkv, d.dh));
            }
        }
    }
}

// Anchors covering: padding (-1), no context (0), all context (ctx_len), near the end, random.
std::vector<int32_t> make_anchors(int64_t n, int64_t ctx, Rng& rng) {
    const int32_t fixed[] = {static_cast<int32_t>(ctx - 1), 0, -1, static_cast<int32_t>(ctx)};
    std::vector<int32_t> a(n);
    for (int64_t i = 0; i < n; ++i) {
        a[i] = i < 4 ? std::max(fixed[i], -1) : static_cast<int32_t>(rng.below(ctx + 1));
    }
    return a;
}

TEST(AttentionForward, DflashBlockMatchesDenseReference) {
    struct Case {
        int64_t n, block, ctx;
    };
    const Case cases[] = {
        {1, 1, 4},  {7, 1, 9}, {1, 7, 5},   {1, 13, 11}, {3, 4, 10},
        {5, 3, 17}, {6, 2, 0}, {40, 4, 30}, {3, 50, 20}};  // the last two span several chunks
    uint64_t seed = 200;
    for (const Dims& hc : kHeadConfigs) {
        for (const Case& c : cases) {
            Rng rng(seed);
            std::vector<int32_t> anchors = make_anchors(c.n, c.ctx, rng);
            const HostTensor anchors_t = test::ids_tensor(anchors);
            const Dims d{c.n * c.block, c.ctx + c.n * c.block, hc.h, hc.hkv, hc.dh};
            expect_matches_reference(
                make_problem(d, AttnMask::dflash_block(c.ctx, c.block, anchors_t), seed++),
                fmt::format("n={} block={} ctx={} h={} hkv={} dh={} anchor0={}", c.n, c.block,
                            c.ctx, d.h, d.hkv, d.dh, anchors[0]));
        }
    }
}

// Document-aware blocks (ctx_start): block n sees context keys [ctx_start[n], anchors[n]) only.
// Starts drawn in [0, anchor], including the edge cases start == 0 and start == anchor (no
// context at all), across several query chunks.
TEST(AttentionForward, DflashBlockWithContextStartsMatchesDenseReference) {
    uint64_t seed = 600;
    for (const Dims& hc : kHeadConfigs) {
        for (int64_t n : {3, 40}) {
            Rng rng(seed);
            const int64_t ctx = 37, block = 4;
            const std::vector<int32_t> anchors = make_anchors(n, ctx, rng);
            std::vector<int32_t> starts(anchors.size());
            for (size_t b = 0; b < anchors.size(); ++b) {
                const int32_t a = std::max(anchors[b], 0);
                starts[b] = b % 4 == 0   ? 0
                            : b % 4 == 1 ? a
                                         : static_cast<int32_t>(rng.below(a + 1));
            }
            const HostTensor anchors_t = test::ids_tensor(anchors),
                             starts_t = test::ids_tensor(starts);
            const Dims d{n * block, ctx + n * block, hc.h, hc.hkv, hc.dh};
            expect_matches_reference(
                make_problem(d, AttnMask::dflash_block(ctx, block, anchors_t, starts_t), seed++),
                fmt::format("n={} h={} hkv={} dh={}", n, d.h, d.hkv, d.dh));
        }
    }
}

// The KV-cache decode property: rows of one causal run equal a run of just those rows with
// q_offset = their position over the keys up to the last of them.
TEST(AttentionForward, CausalWithOffsetEqualsRowsOfFullCausalRun) {
    const Dims d{13, 13, 4, 2, 8};
    const Problem whole = make_problem(d, AttnMask::causal(0), 7);
    const FwdResult ref = run_fwd(whole);
    const int64_t row = d.h * d.dh;
    auto check = [&](int64_t q0, int64_t q1, int64_t sk) {
        SCOPED_TRACE(fmt::format("rows [{}, {}) over {} keys", q0, q1, sk));
        Problem part{{q1 - q0, sk, d.h, d.hkv, d.dh},
                     AttnMask::causal(q0),
                     HostTensor(),
                     HostTensor(),
                     HostTensor()};
        part.q = HostTensor({q1 - q0, d.h, d.dh});
        part.k = HostTensor({sk, d.hkv, d.dh});
        part.v = HostTensor({sk, d.hkv, d.dh});
        copy_tensor(part.q, whole.q.view().rows(q0, q1));
        copy_tensor(part.k, whole.k.view().rows(0, sk));
        copy_tensor(part.v, whole.v.view().rows(0, sk));
        const FwdResult got = run_fwd(part);
        for (int64_t i = 0; i < (q1 - q0) * row; ++i) {
            EXPECT_NEAR(got.out.f32()[i], ref.out.f32()[q0 * row + i], 1e-6);
        }
        for (int64_t h = 0; h < d.h; ++h) {
            for (int64_t i = 0; i < q1 - q0; ++i) {
                EXPECT_NEAR(got.lse.f32()[h * (q1 - q0) + i], ref.lse.f32()[h * d.sq + q0 + i],
                            1e-6);
            }
        }
    };
    for (int64_t pos = 0; pos < d.sq; ++pos) check(pos, pos + 1, pos + 1);  // one-token decode
    check(8, 13, 13);                                                       // a verify block
    check(3, 6, 13);  // a cache longer than needed
}

// The engine's lossless check needs more than closeness: a verify row over the KV cache must be
// the 1-token decode of the same input bit for bit (an 8-row verify sums and reduces each row's
// scores exactly as a 1-row decode does; sgemm_test checks the products, this the whole op).
TEST(AttentionForward, VerifyRowsOverCacheEqualOneTokenDecodesBitForBit) {
    const Dims d{8, 48, 4, 2, 64};  // head dim and GQA of the demo target; 48 cache rows
    const Problem p = make_problem(d, AttnMask::causal(0), 17);
    constexpr int64_t kLen = 45;  // cache rows in use after the verify block
    auto run = [&](int64_t q0, int64_t q1, int64_t len) {
        HostTensor q({q1 - q0, d.h, d.dh}), out({q1 - q0, d.h, d.dh}), lse({d.h, q1 - q0});
        HostTensor kv_len = HostTensor::from_i32({1}, {static_cast<int32_t>(len)});
        copy_tensor(q, p.q.view().rows(q0, q1));
        cpu::attention_fwd(cpu::PooledExec{1}, q, p.k, p.v,
                           AttnMask::over_cache(AttnMaskKind::causal, kv_len), out, lse);
        return FwdResult{std::move(out), std::move(lse)};
    };
    const FwdResult verify = run(0, d.sq, kLen);
    const int64_t row = d.h * d.dh;
    for (int64_t i = 0; i < d.sq; ++i) {
        const FwdResult decode = run(i, i + 1, kLen - d.sq + i + 1);
        EXPECT_EQ(std::memcmp(decode.out.f32(), verify.out.f32() + i * row, row * sizeof(float)), 0)
            << "row " << i;
        for (int64_t h = 0; h < d.h; ++h) {
            EXPECT_EQ(
                std::memcmp(decode.lse.f32() + h, verify.lse.f32() + h * d.sq + i, sizeof(float)),
                0)
                << "row " << i << " head " << h;
        }
    }
}

TEST(AttentionForward, AnchorAtZeroSeesOnlyItsBlockAndAtEndSeesAllContext) {
    const int64_t ctx = 6, block = 4;
    const HostTensor anchors = test::ids_tensor({0, static_cast<int32_t>(ctx)});
    const Dims d{2 * block, ctx + 2 * block, 4, 2, 8};
    const Problem p = make_problem(d, AttnMask::dflash_block(ctx, block, anchors), 11);
    const FwdResult got = run_fwd(p);
    const int64_t row = d.h * d.dh;
    // Block 0 alone under a full mask over its own keys.
    Problem b0{{block, block, d.h, d.hkv, d.dh},
               AttnMask::full(),
               HostTensor({block, d.h, d.dh}),
               HostTensor({block, d.hkv, d.dh}),
               HostTensor({block, d.hkv, d.dh})};
    copy_tensor(b0.q, p.q.view().rows(0, block));
    copy_tensor(b0.k, p.k.view().rows(ctx, ctx + block));
    copy_tensor(b0.v, p.v.view().rows(ctx, ctx + block));
    const FwdResult r0 = run_fwd(b0);
    for (int64_t i = 0; i < block * row; ++i) EXPECT_NEAR(got.out.f32()[i], r0.out.f32()[i], 1e-6);
    // Block 1 with anchor ctx: full attention over [context ; block 1].
    Problem b1{{block, ctx + block, d.h, d.hkv, d.dh},
               AttnMask::full(),
               HostTensor({block, d.h, d.dh}),
               HostTensor({ctx + block, d.hkv, d.dh}),
               HostTensor({ctx + block, d.hkv, d.dh})};
    copy_tensor(b1.q, p.q.view().rows(block, 2 * block));
    copy_tensor(b1.k.view().rows(0, ctx), p.k.view().rows(0, ctx));
    copy_tensor(b1.k.view().rows(ctx, ctx + block), p.k.view().rows(ctx + block, ctx + 2 * block));
    copy_tensor(b1.v.view().rows(0, ctx), p.v.view().rows(0, ctx));
    copy_tensor(b1.v.view().rows(ctx, ctx + block), p.v.view().rows(ctx + block, ctx + 2 * block));
    const FwdResult r1 = run_fwd(b1);
    for (int64_t i = 0; i < block * row; ++i) {
        EXPECT_NEAR(got.out.f32()[block * row + i], r1.out.f32()[i], 1e-6);
    }
}

bool all_finite(const HostTensor& t) {
    for (int64_t i = 0; i < t.numel(); ++i) {
        if (!std::isfinite(t.f32()[i])) return false;
    }
    return true;
}

struct Grads {
    HostTensor dq, dk, dv;
};

Grads run_bwd(const Problem& p, const FwdResult& f, const HostTensor& dout, int threads = 1) {
    Grads g{HostTensor(p.q.shape()), HostTensor(p.k.shape()), HostTensor(p.v.shape())};
    // Garbage in the outputs must be overwritten, not accumulated into.
    fill_f32(g.dq, 7.0f), fill_f32(g.dk, 7.0f), fill_f32(g.dv, 7.0f);
    cpu::attention_bwd(cpu::PooledExec{threads}, dout, p.q, p.k, p.v, f.out, f.lse, p.mask, g.dq,
                       g.dk, g.dv);
    return g;
}

TEST(AttentionForward, PaddingBlocksAndKeylessRowsAreZeroWithoutNaN) {
    const int64_t ctx = 5, block = 3;
    const HostTensor anchors = test::ids_tensor({-1, 3, -5});
    const Dims d{3 * block, ctx + 3 * block, 4, 2, 8};
    const Problem p = make_problem(d, AttnMask::dflash_block(ctx, block, anchors), 21);
    const FwdResult f = run_fwd(p);
    Rng rng(22);
    const HostTensor dout = random_tensor(p.q.shape(), rng);
    const Grads g = run_bwd(p, f, dout);
    EXPECT_TRUE(all_finite(f.out) && all_finite(g.dq) && all_finite(g.dk) && all_finite(g.dv));
    const int64_t row = d.h * d.dh;
    for (int64_t b : {0, 2}) {
        for (int64_t i = b * block * row; i < (b + 1) * block * row; ++i) {
            EXPECT_EQ(f.out.f32()[i], 0.0f);
            EXPECT_EQ(g.dq.f32()[i], 0.0f);
        }
        for (int64_t h = 0; h < d.h; ++h) {
            for (int64_t i = b * block; i < (b + 1) * block; ++i) {
                EXPECT_EQ(f.lse.f32()[h * d.sq + i], -INFINITY);
            }
        }
        // Keys of a padding block are seen by nobody.
        const int64_t krow = d.hkv * d.dh;
        for (int64_t i = (ctx + b * block) * krow; i < (ctx + (b + 1) * block) * krow; ++i) {
            EXPECT_EQ(g.dk.f32()[i], 0.0f);
            EXPECT_EQ(g.dv.f32()[i], 0.0f);
        }
    }
    // Context keys at or after the only real anchor (3) are invisible: zero gradient.
    for (int64_t i = 3 * d.hkv * d.dh; i < ctx * d.hkv * d.dh; ++i) {
        EXPECT_EQ(g.dk.f32()[i], 0.0f);
        EXPECT_EQ(g.dv.f32()[i], 0.0f);
    }

    // A full mask over zero keys: every row sees nothing.
    const Problem empty = make_problem({4, 0, 2, 1, 8}, AttnMask::full(), 23);
    const FwdResult fe = run_fwd(empty);
    for (int64_t i = 0; i < fe.out.numel(); ++i) EXPECT_EQ(fe.out.f32()[i], 0.0f);
    for (int64_t i = 0; i < fe.lse.numel(); ++i) EXPECT_EQ(fe.lse.f32()[i], -INFINITY);
    const Grads ge = run_bwd(empty, fe, random_tensor(empty.q.shape(), rng));
    for (int64_t i = 0; i < ge.dq.numel(); ++i) EXPECT_EQ(ge.dq.f32()[i], 0.0f);
}

// Central differences of L = sum(out * dout) through the double reference, for every element of
// x (which: 0 q, 1 k, 2 v), or for every stride-th one. Returns (op gradient, FD) pairs' error.
double fd_error(const Problem& p, const std::vector<double>& dout, int which, const float* grad,
                int64_t stride) {
    std::vector<double> x[3] = {to_double(p.q), to_double(p.k), to_double(p.v)};
    const std::vector<char> vis = dense_mask(p.mask, p.d);
    auto loss = [&]() {
        const RefResult r = ref_attention(x[0], x[1], x[2], vis, p.d);
        double l = 0;
        for (size_t i = 0; i < r.out.size(); ++i) l += r.out[i] * dout[i];
        return l;
    };
    constexpr double kEps = 1e-5;
    std::vector<double> fd, got;
    for (size_t e = 0; e < x[which].size(); e += stride) {
        const double x0 = x[which][e];
        x[which][e] = x0 + kEps;
        const double lp = loss();
        x[which][e] = x0 - kEps;
        const double lm = loss();
        x[which][e] = x0;
        fd.push_back((lp - lm) / (2 * kEps));
        got.push_back(grad[e]);
    }
    std::vector<float> got_f(got.begin(), got.end());
    return max_rel_diff(got_f.data(), fd);
}

void expect_gradients_match_fd(const Problem& p, uint64_t seed, int64_t stride = 1) {
    Rng rng(seed);
    const HostTensor dout = random_tensor(p.q.shape(), rng);
    const FwdResult f = run_fwd(p);
    const Grads g = run_bwd(p, f, dout);
    const std::vector<double> dd = to_double(dout);
    EXPECT_LT(fd_error(p, dd, 0, g.dq.f32(), stride), 1e-4) << "dq";
    EXPECT_LT(fd_error(p, dd, 1, g.dk.f32(), stride), 1e-4) << "dk";
    EXPECT_LT(fd_error(p, dd, 2, g.dv.f32(), stride), 1e-4) << "dv";
}

TEST(AttentionBackward, CausalGradientsMatchFiniteDifferences) {
    expect_gradients_match_fd(make_problem({7, 7, 4, 2, 8}, AttnMask::causal(0), 31), 32);
    expect_gradients_match_fd(make_problem({5, 12, 3, 1, 12}, AttnMask::causal(4), 33), 34);
}

TEST(AttentionBackward, FullGradientsMatchFiniteDifferences) {
    expect_gradients_match_fd(make_problem({7, 9, 6, 6, 8}, AttnMask::full(), 41), 42);
    expect_gradients_match_fd(make_problem({1, 13, 4, 2, 12}, AttnMask::full(), 43), 44);
}

TEST(AttentionBackward, DflashBlockGradientsMatchFiniteDifferences) {
    const HostTensor anchors = test::ids_tensor({4, -1, 0, 9});
    const int64_t ctx = 9, block = 3;
    expect_gradients_match_fd(make_problem({4 * block, ctx + 4 * block, 4, 2, 8},
                                           AttnMask::dflash_block(ctx, block, anchors), 51),
                              52);
    expect_gradients_match_fd(make_problem({4 * block, ctx + 4 * block, 3, 1, 12},
                                           AttnMask::dflash_block(ctx, block, anchors), 53),
                              54);
}

TEST(AttentionBackward, DflashBlockWithContextStartsGradientsMatchFiniteDifferences) {
    const HostTensor anchors = test::ids_tensor({4, -1, 7, 9});
    const HostTensor starts = test::ids_tensor({2, 0, 7, 5});
    const int64_t ctx = 9, block = 3;
    expect_gradients_match_fd(make_problem({4 * block, ctx + 4 * block, 4, 2, 8},
                                           AttnMask::dflash_block(ctx, block, anchors, starts), 61),
                              62);
}

TEST(AttentionValidation, ContextStartOutsideZeroToAnchorIsAnError) {
    const HostTensor anchors = test::ids_tensor({4, -1});
    const HostTensor good = test::ids_tensor({4, 9}), late = test::ids_tensor({5, 0});
    // A padding block's start is not read.
    EXPECT_NO_THROW(
        run_fwd(make_problem({6, 12, 2, 1, 8}, AttnMask::dflash_block(6, 3, anchors, good), 63)));
    EXPECT_THROW(
        run_fwd(make_problem({6, 12, 2, 1, 8}, AttnMask::dflash_block(6, 3, anchors, late), 64)),
        Error);
}

// Several query chunks (128 rows each, whole blocks for dflash_block): dk/dv accumulate across
// chunks. Every 37th element is checked to keep the reference cost down.
TEST(AttentionBackward, MultiChunkGradientsMatchFiniteDifferences) {
    expect_gradients_match_fd(make_problem({140, 143, 2, 1, 8}, AttnMask::causal(3), 55), 56, 37);
    Rng rng(57);
    const std::vector<int32_t> anchors = make_anchors(34, 12, rng);
    const HostTensor anchors_t = test::ids_tensor(anchors);
    expect_gradients_match_fd(
        make_problem({34 * 4, 12 + 34 * 4, 2, 1, 8}, AttnMask::dflash_block(12, 4, anchors_t), 58),
        59, 37);
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.f32(), b.f32(), a.nbytes()) == 0;
}

struct AllOutputs {
    FwdResult f;
    Grads g;
};

AllOutputs run_all(const Problem& p, const HostTensor& dout, int threads) {
    FwdResult f = run_fwd(p, threads);
    Grads g = run_bwd(p, f, dout, threads);
    return {std::move(f), std::move(g)};
}

void expect_same_bits(const AllOutputs& a, const AllOutputs& b) {
    EXPECT_TRUE(same_bits(a.f.out, b.f.out));
    EXPECT_TRUE(same_bits(a.f.lse, b.f.lse));
    EXPECT_TRUE(same_bits(a.g.dq, b.g.dq));
    EXPECT_TRUE(same_bits(a.g.dk, b.g.dk));
    EXPECT_TRUE(same_bits(a.g.dv, b.g.dv));
}

// 1, 2 and 3 threads (the pool spreads (head, chunk) units, kv groups in the backward) give
// the same bits.
void expect_thread_invariant(const Problem& p) {
    Rng rng(61);
    const HostTensor dout = random_tensor(p.q.shape(), rng);
    const AllOutputs base = run_all(p, dout, 1);
    for (int threads : {2, 3}) {
        SCOPED_TRACE(threads);
        expect_same_bits(base, run_all(p, dout, threads));
    }
}

TEST(AttentionThreads, OneAndThreeThreadsGiveIdenticalBits) {
    expect_thread_invariant(make_problem({150, 180, 4, 2, 12}, AttnMask::causal(30), 71));
    expect_thread_invariant(make_problem({45, 130, 3, 1, 8}, AttnMask::full(), 72));
    Rng rng(73);
    const std::vector<int32_t> anchors = make_anchors(40, 90, rng);
    const HostTensor anchors_t = test::ids_tensor(anchors);
    expect_thread_invariant(
        make_problem({40 * 4, 90 + 40 * 4, 4, 2, 8}, AttnMask::dflash_block(90, 4, anchors_t), 74));
}

// Runs the forward and returns the error message ("" when it did not throw).
std::string fwd_error(const Dims& d, const AttnMask& mask, int64_t k_dh = -1) {
    Rng rng(81);
    const HostTensor q = random_tensor({d.sq, d.h, d.dh}, rng);
    const HostTensor k = random_tensor({d.sk, d.hkv, k_dh < 0 ? d.dh : k_dh}, rng);
    const HostTensor v = random_tensor(k.shape(), rng);
    HostTensor out({d.sq, d.h, d.dh});
    try {
        cpu::attention_fwd(cpu::PooledExec{1}, q, k, v, mask, out, Tensor());
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

TEST(AttentionValidation, BadShapesAndMasksGiveClearErrors) {
    auto has = [](const std::string& msg, const std::string& part) {
        return msg.find(part) != std::string::npos;
    };
    EXPECT_TRUE(has(fwd_error({4, 4, 3, 2, 8}, AttnMask::full()), "positive multiple of Hkv"));
    EXPECT_TRUE(has(fwd_error({4, 4, 4, 2, 8}, AttnMask::full(), 6), "head dim"));
    EXPECT_TRUE(has(fwd_error({4, 5, 4, 2, 8}, AttnMask::causal(2)), "q_offset + Sq <= Sk"));
    const HostTensor anchors = test::ids_tensor({1, 2, 3});
    EXPECT_TRUE(has(fwd_error({7, 10, 4, 2, 8}, AttnMask::dflash_block(3, 3, anchors)),
                    "multiple of block_size"));
    EXPECT_TRUE(has(fwd_error({6, 10, 4, 2, 8}, AttnMask::dflash_block(3, 3, anchors)),
                    "Sk = ctx_len + Sq"));
    const HostTensor late = test::ids_tensor({1, 5});
    EXPECT_TRUE(
        has(fwd_error({6, 9, 4, 2, 8}, AttnMask::dflash_block(3, 3, late)), "anchors[1]=5"));
    EXPECT_EQ(fwd_error({6, 9, 4, 2, 8}, AttnMask::dflash_block(3, 3, anchors)), "");
}

// ---- sliding windows and sinks (gpt-oss) ------------------------------------------------------

// A window of 1 (only itself), shorter than the sequence, and longer than it (= no window), with
// and without a query offset, over every head configuration (GQA included); then several query
// chunks of 128 rows, where a chunk's first keys start past 0.
TEST(AttentionForward, WindowedCausalMatchesDenseReference) {
    uint64_t seed = 900;
    for (const Dims& hc : kHeadConfigs) {
        for (int64_t sq : {1, 7, 13}) {
            for (int64_t q_offset : {0, 5}) {
                for (int64_t window : {1, 3, 6, 40}) {
                    const Dims d{sq, q_offset + sq + 2, hc.h, hc.hkv, hc.dh};
                    expect_matches_reference(
                        make_problem(d, AttnMask::causal(q_offset).with_window(window), seed++),
                        fmt::format("sq={} q_offset={} window={} h={} hkv={}", sq, q_offset, window,
                                    d.h, d.hkv));
                }
            }
        }
    }
    for (int64_t window : {1, 37, 128, 200}) {
        expect_matches_reference(
            make_problem({300, 305, 4, 2, 12}, AttnMask::causal(5).with_window(window), seed++),
            fmt::format("multi-chunk window={}", window));
    }
}

HostTensor sinks_tensor(int64_t h, Rng& rng) {
    std::vector<float> s(static_cast<size_t>(h));
    for (auto& x : s) x = 2.0f * rng.normal();  // logits of the order of the scores'
    return HostTensor::from_f32({h}, s);
}

// Sinks on every mask kind, and with a window over a KV cache (kv_len) whose queries sit at its
// end, against the naive formula of ref_attention.
TEST(AttentionForward, SinksMatchNaiveFormula) {
    uint64_t seed = 950;
    for (const Dims& hc : kHeadConfigs) {
        Rng rng(seed);
        const HostTensor sinks = sinks_tensor(hc.h, rng);
        const Dims d{9, 14, hc.h, hc.hkv, hc.dh};
        expect_matches_reference(make_problem(d, AttnMask::causal(3).with_sinks(sinks), seed++),
                                 "causal");
        expect_matches_reference(make_problem(d, AttnMask::full().with_sinks(sinks), seed++),
                                 "full");
        const HostTensor anchors = test::ids_tensor({2, -1, 5});
        expect_matches_reference(
            make_problem({9, 14, hc.h, hc.hkv, hc.dh},
                         AttnMask::dflash_block(5, 3, anchors).with_sinks(sinks), seed++),
            "dflash_block");
        for (int32_t len : {9, 20, 30}) {
            const HostTensor kv_len = HostTensor::from_i32({1}, {len});
            expect_matches_reference(make_problem({9, 30, hc.h, hc.hkv, hc.dh},
                                                  AttnMask::over_cache(AttnMaskKind::causal, kv_len)
                                                      .with_window(4)
                                                      .with_sinks(sinks),
                                                  seed++),
                                     fmt::format("cache kv_len={} window 4", len));
        }
    }
}

// A sink far below every score adds exp(-huge) = 0 to each denominator: the bits of the run
// without sinks.
TEST(AttentionForward, VeryNegativeSinkIsNoSink) {
    const Dims d{13, 20, 4, 2, 8};
    const HostTensor sinks = HostTensor::from_f32({4}, {-1e30f, -1e30f, -1e30f, -1e30f});
    for (const AttnMask& m : {AttnMask::causal(7), AttnMask::causal(7).with_window(5)}) {
        const Problem plain = make_problem(d, m, 960);
        const Problem sunk = make_problem(d, m.with_sinks(sinks), 960);
        const FwdResult a = run_fwd(plain), b = run_fwd(sunk);
        EXPECT_TRUE(same_bits(a.out, b.out));
        EXPECT_TRUE(same_bits(a.lse, b.lse));
    }
}

// A row that sees no key but has a sink: out 0 and lse = the sink (the sink takes all the mass).
TEST(AttentionForward, KeylessRowWithSinkIsZeroWithLseAtTheSink) {
    const HostTensor sinks = HostTensor::from_f32({4}, {0.5f, -2.0f, 3.0f, 0.0f});
    const HostTensor anchors = test::ids_tensor({-1, 3});
    const HostTensor none = HostTensor::from_i32({1}, {0});
    const Problem block = make_problem(
        {6, 11, 4, 2, 8}, AttnMask::dflash_block(5, 3, anchors).with_sinks(sinks), 970);
    const Problem empty_cache = make_problem(
        {3, 8, 4, 2, 8}, AttnMask::over_cache(AttnMaskKind::full, none).with_sinks(sinks), 971);
    for (const Problem* p : {&block, &empty_cache}) {
        const FwdResult f = run_fwd(*p);
        EXPECT_TRUE(all_finite(f.out));
        const int64_t keyless = p == &block ? 3 : p->d.sq;  // block 0 is padding
        for (int64_t i = 0; i < keyless * p->d.h * p->d.dh; ++i) EXPECT_EQ(f.out.f32()[i], 0.0f);
        for (int64_t h = 0; h < p->d.h; ++h) {
            for (int64_t i = 0; i < keyless; ++i)
                EXPECT_EQ(f.lse.f32()[h * p->d.sq + i], sinks.f32()[h]) << h << " " << i;
        }
    }
    expect_matches_reference(block, "dflash padding with sinks");
}

// As VerifyRowsOverCacheEqualOneTokenDecodesBitForBit, with a window and sinks: each verified
// row must equal its one-token decode bit for bit although the block's keys start earlier.
TEST(AttentionForward, WindowedVerifyRowsWithSinksEqualOneTokenDecodesBitForBit) {
    const Dims d{8, 48, 4, 2, 64};
    Rng rng(980);
    const HostTensor sinks = sinks_tensor(d.h, rng);
    const Problem p = make_problem(d, AttnMask::causal(0), 981);
    for (int64_t window : {1, 3, 20}) {
        auto run = [&](int64_t q0, int64_t q1, int64_t len) {
            HostTensor q({q1 - q0, d.h, d.dh}), out({q1 - q0, d.h, d.dh}), lse({d.h, q1 - q0});
            const HostTensor kv_len = HostTensor::from_i32({1}, {static_cast<int32_t>(len)});
            copy_tensor(q, p.q.view().rows(q0, q1));
            const AttnMask m = AttnMask::over_cache(AttnMaskKind::causal, kv_len)
                                   .with_window(window)
                                   .with_sinks(sinks);
            cpu::attention_fwd(cpu::PooledExec{1}, q, p.k, p.v, m, out, lse);
            return FwdResult{std::move(out), std::move(lse)};
        };
        const int64_t len = 45;
        const FwdResult verify = run(0, d.sq, len);
        const int64_t row = d.h * d.dh;
        for (int64_t i = 0; i < d.sq; ++i) {
            const FwdResult one = run(i, i + 1, len - d.sq + i + 1);
            EXPECT_EQ(std::memcmp(one.out.f32(), verify.out.f32() + i * row, row * sizeof(float)),
                      0)
                << "window " << window << " row " << i;
            for (int64_t h = 0; h < d.h; ++h)
                EXPECT_EQ(one.lse.f32()[h], verify.lse.f32()[h * d.sq + i]) << "row " << i;
        }
    }
}

TEST(AttentionBackward, WindowedCausalGradientsMatchFiniteDifferences) {
    expect_gradients_match_fd(make_problem({9, 9, 4, 2, 8}, AttnMask::causal(0).with_window(3), 91),
                              92);
    expect_gradients_match_fd(
        make_problem({6, 12, 3, 1, 12}, AttnMask::causal(4).with_window(1), 93), 94);
    expect_gradients_match_fd(
        make_problem({140, 143, 2, 1, 8}, AttnMask::causal(3).with_window(50), 95), 96, 37);
    expect_thread_invariant(
        make_problem({150, 180, 4, 2, 12}, AttnMask::causal(30).with_window(70), 97));
}

// Sliding-window drafter layers (ops.h): dflash_block with a window (1, shorter than the block,
// shorter than the context, longer than everything), causal blocks or not, context starts.
TEST(AttentionForward, WindowedDflashBlockMatchesDenseReference) {
    uint64_t seed = 1000;
    const int64_t ctx = 23, block = 4, n = 6;
    Rng rng(seed);
    const std::vector<int32_t> anchors = make_anchors(n, ctx, rng);
    const HostTensor anchors_t = test::ids_tensor(anchors);
    const HostTensor starts_t = test::ids_tensor({0, 0, 0, 5, 2, 1});
    for (const Dims& hc : kHeadConfigs) {
        for (int64_t window : {1, 3, 9, 64}) {
            for (bool causal : {true, false}) {
                for (bool starts : {false, true}) {
                    const AttnMask m =
                        AttnMask::dflash_block(ctx, block, anchors_t, starts ? starts_t : Tensor())
                            .with_window(window)
                            .with_causal_block(causal);
                    expect_matches_reference(
                        make_problem({n * block, ctx + n * block, hc.h, hc.hkv, hc.dh}, m, seed++),
                        fmt::format("window={} causal={} starts={} h={}", window, causal, starts,
                                    hc.h));
                }
            }
        }
    }
}

TEST(AttentionBackward, WindowedDflashBlockGradientsMatchFiniteDifferences) {
    const HostTensor anchors = test::ids_tensor({4, -1, 0, 9});
    const int64_t ctx = 9, block = 3;
    for (int64_t window : {2, 5}) {
        expect_gradients_match_fd(
            make_problem(
                {4 * block, ctx + 4 * block, 4, 2, 8},
                AttnMask::dflash_block(ctx, block, anchors).with_window(window).with_causal_block(),
                71 + window),
            72);
    }
    expect_gradients_match_fd(
        make_problem({4 * block, ctx + 4 * block, 3, 1, 12},
                     AttnMask::dflash_block(ctx, block, anchors).with_window(4), 75),
        76);
    Rng rng(77);
    const HostTensor many = test::ids_tensor(make_anchors(34, 40, rng));
    expect_gradients_match_fd(
        make_problem({34 * 4, 40 + 34 * 4, 2, 1, 8},
                     AttnMask::dflash_block(40, 4, many).with_window(7).with_causal_block(), 78),
        79, 37);
}

TEST(AttentionValidation, WindowOutsideCausalAndSinksInBackwardAreErrors) {
    auto has = [](const std::string& msg, const std::string& part) {
        return msg.find(part) != std::string::npos;
    };
    const std::string not_full = "a sliding window applies to causal and dflash_block masks only";
    EXPECT_TRUE(has(fwd_error({4, 4, 4, 2, 8}, AttnMask::full().with_window(2)), not_full));
    const HostTensor anchors = test::ids_tensor({1, 2});
    EXPECT_EQ(fwd_error({6, 9, 4, 2, 8}, AttnMask::dflash_block(3, 3, anchors).with_window(2)), "");
    EXPECT_TRUE(has(fwd_error({4, 4, 4, 2, 8}, AttnMask::causal().with_causal_block()),
                    "applies to dflash_block masks only"));
    EXPECT_TRUE(has(fwd_error({4, 4, 4, 2, 8}, AttnMask::causal().with_window(-1)), ">= 0"));
    const HostTensor three = HostTensor::from_f32({3}, {0, 0, 0});
    EXPECT_TRUE(
        has(fwd_error({4, 4, 4, 2, 8}, AttnMask::causal().with_sinks(three)), "expected f32 [4]"));
    EXPECT_EQ(fwd_error({4, 4, 4, 2, 8}, AttnMask::causal().with_window(2)), "");

    const HostTensor sinks = HostTensor::from_f32({4}, {0, 0, 0, 0});
    const Problem p = make_problem({4, 4, 4, 2, 8}, AttnMask::causal().with_sinks(sinks), 99);
    const FwdResult f = run_fwd(p);
    Grads g{HostTensor(p.q.shape()), HostTensor(p.k.shape()), HostTensor(p.v.shape())};
    try {
        cpu::attention_bwd(cpu::PooledExec{1}, f.out, p.q, p.k, p.v, f.out, f.lse, p.mask, g.dq,
                           g.dk, g.dv);
        ADD_FAILURE() << "attention_bwd accepted sinks";
    } catch (const Error& e) {
        EXPECT_TRUE(has(e.what(), "attention_bwd: sinks are forward-only (targets are frozen)"))
            << e.what();
    }
}

}  // namespace
}  // namespace dflash

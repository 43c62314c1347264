// The CUDA attention kernels (src/backend/cuda/kernels/attention_{fwd,bwd}.cu) run on the CPU
// emulator of tests/ops/attention_emu.h (Note [Attention kernels on the CPU]) against a dense
// double-precision reference, on small awkward sizes of every mask kind and path: FlashAttention-2
// forward (each of its block shapes: 4 warps of 16 or 32 query rows, 8 warps of 16; the backward
// then reads each one's lse), split-KV decode + combine (and its row invariance), the dflash
// pre-pass, and the delta / dQ / dK-dV backward; causal sliding windows (forward, backward, decode)
// and per-head sinks (forward and decode; with sinks the reference's lse includes the sink's term);
// head dims 64, 128 and 256 (at 256 the dK/dV pass runs as two launches, one per accumulator). This
// checks the kernels' index arithmetic, fragment plumbing, masking and pipelining without a GPU
// (label cpu: runs in CI); tests/cuda/attention_cuda_test.cpp checks the real thing. Both cp.async
// modes run (copies at the wait, copies at issue). Tolerances (bf16 inputs, bf16 outputs, fp32
// accumulation, P and dS rounded to bf16 for the tensor cores): out and dq/dk/dv relative L2 error
// <= 1e-2 / 2e-2 of the reference, lse within 1e-3 (-inf exactly where a row sees nothing). Outputs
// start as NaN so unwritten elements fail; K/V rows past kv_len are NaN and must never be read;
// cp.async reads outside the tensors fail the launch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "ops/attention_emu.h"
// The emulator must come first: it defines the CUDA spellings the kernels use.
#include "backend/cuda/kernels/attention_bwd.cu"
#include "backend/cuda/kernels/attention_fwd.cu"

namespace dflash::cuda::attn {
namespace {

using attn_emu::CopyMode;
using attn_emu::Device;

constexpr uint16_t kNanBf16 = 0x7fc0;

struct Case {
    std::string name;
    int sq = 0, sk = 0, h = 1, hkv = 1, d = 64;
    int kind = kCausal;
    int q_offset = 0;
    int ctx = 0, block = 1;
    std::vector<int32_t> anchors;
    std::vector<int32_t> starts;  // dflash context starts (empty: all 0)
    int kv_len = -1;              // -1: no kv_len
    int window = 0;               // causal sliding window (0: none)
    std::vector<float> sinks;     // per-head sink logits (empty: none; forward only)
    bool bwd = false;
    int kv_splits = 0;      // dK/dV splits; 0: the rule of attention.cpp
    double k_growth = 0.0;  // key j's K row times 1 + k_growth * j (CausalGrowingScoresForward)
};

// A bf16 device tensor in host memory with guard elements on both sides.
struct Buf {
    static constexpr size_t kGuard = 64;
    std::vector<uint16_t> mem;
    explicit Buf(size_t n, uint16_t fill) : mem(n + 2 * kGuard, fill) {
        for (size_t i = 0; i < kGuard; ++i) mem[i] = mem[mem.size() - 1 - i] = 0x5a5a;
    }
    uint16_t* data() { return mem.data() + kGuard; }
    size_t size() const { return mem.size() - 2 * kGuard; }
    bool guards_intact() const {
        for (size_t i = 0; i < kGuard; ++i) {
            if (mem[i] != 0x5a5a || mem[mem.size() - 1 - i] != 0x5a5a) return false;
        }
        return true;
    }
    float at(size_t i) const { return bf16_to_f32(mem[kGuard + i]); }
};

struct Inputs {
    std::vector<float> q, k, v, dout;  // bf16-rounded values
    int sk_eff = 0;                    // keys that exist (kv_len)
};

std::vector<float> random_bf16(size_t n, Rng& rng) {
    std::vector<float> x(n);
    for (auto& e : x) e = bf16_to_f32(f32_to_bf16(rng.normal()));
    return x;
}

// The mask by its definition, kv_len resolved.
bool visible(const Case& c, int sk_eff, int i, int j) {
    if (j >= sk_eff) return false;
    if (c.kind == kFull) return true;
    if (c.kind == kCausal) {
        const int q_offset = c.kv_len >= 0 ? sk_eff - c.sq : c.q_offset;
        return j <= q_offset + i && (c.window == 0 || j > q_offset + i - c.window);
    }
    const int a = c.anchors[i / c.block];
    if (a < 0) return false;
    const int b = c.starts.empty() ? 0 : c.starts[i / c.block];
    return j < c.ctx ? j >= b && j < a : (j - c.ctx) / c.block == i / c.block;
}

struct Ref {
    std::vector<double> out, lse, dq, dk, dv;
};

// Dense attention in double: forward, and with dout the backward.
Ref reference(const Case& c, const Inputs& in) {
    const int g = c.h / c.hkv, D = c.d;
    const double scale = 1.0 / std::sqrt(double(D));
    Ref r;
    r.out.assign(size_t(c.sq) * c.h * D, 0.0);
    r.lse.assign(size_t(c.h) * c.sq, -INFINITY);
    r.dq.assign(r.out.size(), 0.0);
    r.dk.assign(size_t(c.sk) * c.hkv * D, 0.0);
    r.dv.assign(r.dk.size(), 0.0);
    std::vector<double> p(c.sk), dp(c.sk);
    auto Q = [&](const std::vector<float>& t, int i, int h, int e) {
        return double(t[(size_t(i) * c.h + h) * D + e]);
    };
    auto K = [&](const std::vector<float>& t, int j, int hk, int e) {
        return double(t[(size_t(j) * c.hkv + hk) * D + e]);
    };
    for (int h = 0; h < c.h; ++h) {
        const int hk = h / g;
        for (int i = 0; i < c.sq; ++i) {
            double m = -INFINITY;
            for (int j = 0; j < c.sk; ++j) {
                p[j] = -INFINITY;
                if (!visible(c, in.sk_eff, i, j)) continue;
                double s = 0;
                for (int e = 0; e < D; ++e) s += Q(in.q, i, h, e) * K(in.k, j, hk, e);
                p[j] = s * scale;
                m = std::max(m, p[j]);
            }
            // A sink joins the denominator only: p_ij = exp(x_ij) / (sum_j exp(x_ij) + exp(s_h)).
            const double sink = c.sinks.empty() ? -INFINITY : double(c.sinks[h]);
            m = std::max(m, sink);
            if (m == -INFINITY) continue;
            double sum = std::exp(sink - m);
            for (int j = 0; j < c.sk; ++j) sum += p[j] == -INFINITY ? 0.0 : std::exp(p[j] - m);
            r.lse[size_t(h) * c.sq + i] = m + std::log(sum);
            for (int j = 0; j < c.sk; ++j)
                p[j] = p[j] == -INFINITY ? 0.0 : std::exp(p[j] - m) / sum;
            double* o = &r.out[(size_t(i) * c.h + h) * D];
            for (int j = 0; j < c.sk; ++j) {
                if (p[j] == 0.0) continue;
                for (int e = 0; e < D; ++e) o[e] += p[j] * K(in.v, j, hk, e);
            }
            if (!c.bwd) continue;
            double delta = 0;
            for (int e = 0; e < D; ++e) delta += Q(in.dout, i, h, e) * o[e];
            for (int j = 0; j < c.sk; ++j) {
                if (p[j] == 0.0) continue;
                double d = 0;
                for (int e = 0; e < D; ++e) d += Q(in.dout, i, h, e) * K(in.v, j, hk, e);
                const double ds = p[j] * (d - delta);
                for (int e = 0; e < D; ++e) {
                    r.dq[(size_t(i) * c.h + h) * D + e] += scale * ds * K(in.k, j, hk, e);
                    r.dk[(size_t(j) * c.hkv + hk) * D + e] += scale * ds * Q(in.q, i, h, e);
                    r.dv[(size_t(j) * c.hkv + hk) * D + e] += p[j] * Q(in.dout, i, h, e);
                }
            }
        }
    }
    return r;
}

// Relative L2 error and the first element off by more than atol + rtol |ref|.
void expect_close(const char* what, const Case& c, const Buf& got, const std::vector<double>& ref,
                  double rel_tol) {
    double num = 0, den = 0, worst = 0;
    size_t first_bad = ref.size(), worst_at = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double x = got.at(i), y = ref[i], e = std::fabs(x - y);
        if (!(e <= 3e-2 + 3e-2 * std::fabs(y)) && first_bad == ref.size()) first_bad = i;
        if (!(e <= worst)) {
            worst = e;
            worst_at = i;
        }
        num += (x - y) * (x - y);
        den += y * y;
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    EXPECT_TRUE(rel <= rel_tol && first_bad == ref.size())
        << c.name << " " << what << ": rel L2 error " << rel << " (tol " << rel_tol
        << "), max abs error " << worst << " at " << worst_at << " (got " << got.at(worst_at)
        << " want " << ref[worst_at] << "), first bad element "
        << (first_bad == ref.size()
                ? std::string("none")
                : std::to_string(first_bad) + " got " + std::to_string(got.at(first_bad)) +
                      " want " + std::to_string(ref[first_bad]));
    EXPECT_TRUE(got.guards_intact()) << c.name << " " << what << ": write outside the tensor";
}

// Everything one run keeps alive: device tensors (host memory here) and the emulated device.
struct Run {
    Buf q, k, v, out, dout, dq, dk, dv;
    std::vector<float> lse, delta, part_o, part_ml, dkdv_part;
    std::vector<int32_t> anchors, starts, kv_len;
    std::vector<float> sinks;
    std::vector<QTileKeys> table;
    Device dev;

    Run(const Case& c, const Inputs& in, CopyMode mode)
        : q(in.q.size(), 0),
          k(in.k.size(), 0),
          v(in.v.size(), 0),
          out(in.q.size(), kNanBf16),
          dout(in.q.size(), 0),
          dq(in.q.size(), kNanBf16),
          dk(in.k.size(), kNanBf16),
          dv(in.k.size(), kNanBf16),
          anchors(c.anchors),
          starts(c.starts),
          sinks(c.sinks) {
        auto put = [](Buf& b, const std::vector<float>& x) {
            for (size_t i = 0; i < x.size(); ++i) b.data()[i] = f32_to_bf16(x[i]);
        };
        put(q, in.q);
        put(k, in.k);
        put(v, in.v);
        put(dout, in.dout);
        // Cache rows past kv_len hold NaN: they must never be read.
        for (size_t i = size_t(in.sk_eff) * c.hkv * c.d; i < k.size(); ++i) {
            k.data()[i] = kNanBf16;
            v.data()[i] = kNanBf16;
        }
        if (c.kv_len >= 0) kv_len = {c.kv_len};
        lse.assign(size_t(c.h) * c.sq, std::numeric_limits<float>::quiet_NaN());
        dev.mode = mode;
    }
    void expose(const void* p, size_t bytes) {
        const auto* b = static_cast<const unsigned char*>(p);
        dev.buffers.push_back({b, b + bytes});
    }
    MaskArgs mask(const Case& c) const {
        MaskArgs m;
        m.kind = c.kind;
        m.sq = c.sq;
        m.sk = c.sk;
        m.q_offset = c.q_offset;
        m.ctx_len = c.ctx;
        m.block = c.block;
        m.anchors = anchors.empty() ? nullptr : anchors.data();
        m.ctx_start = starts.empty() ? nullptr : starts.data();
        m.kv_len = kv_len.empty() ? nullptr : kv_len.data();
        m.window = c.window;
        m.sinks = sinks.empty() ? nullptr : sinks.data();
        return m;
    }
};

// Whether the case takes the FlashAttention-2 kernel (else the split-KV decode).
bool tiled_fwd(const Case& c) {
    return c.kind == kDflash || c.sq > 16;
}

// The dispatch of backend/cuda/attention.cpp, on the emulator, with the forward's block shape.
void run_fwd(const Case& c, Run& r, FwdTile tile = FwdTile::automatic) {
    FwdArgs a;
    a.tile = tile;
    a.mask = r.mask(c);
    a.q = r.q.data();
    a.k = r.k.data();
    a.v = r.v.data();
    a.out = r.out.data();
    a.lse = r.lse.data();
    a.h = c.h;
    a.hkv = c.hkv;
    a.d = c.d;
    r.expose(a.q, r.q.size() * 2);
    r.expose(a.k, size_t(c.sk) * c.hkv * c.d * 2);  // NaN rows included: only kv_len guards them
    r.expose(a.v, size_t(c.sk) * c.hkv * c.d * 2);
    if (!tiled_fwd(c)) {
        const DecodePlan p = plan_decode(c.sq, c.h / c.hkv, c.sk);
        r.part_o.assign(decode_partial_floats(a, p), std::numeric_limits<float>::quiet_NaN());
        r.part_ml.assign(decode_stats_floats(a, p), std::numeric_limits<float>::quiet_NaN());
        decode(a, p, r.part_o.data(), r.part_ml.data(), attn_emu::as_stream(r.dev));
        return;
    }
    if (c.kind == kDflash) {
        r.table.assign(size_t(num_query_tiles(c.sq)), QTileKeys{});
        dflash_plan(a.mask, r.table.data(), attn_emu::as_stream(r.dev));
        a.mask.qtiles = r.table.data();
    }
    fwd(a, attn_emu::as_stream(r.dev));
}

void run_bwd(const Case& c, Run& r) {
    BwdArgs a;
    a.mask = r.mask(c);
    if (c.kind == kDflash) a.mask.qtiles = r.table.data();  // made by run_fwd
    a.dout = r.dout.data();
    a.q = r.q.data();
    a.k = r.k.data();
    a.v = r.v.data();
    a.out = r.out.data();
    a.lse = r.lse.data();
    a.dq = r.dq.data();
    a.dk = r.dk.data();
    a.dv = r.dv.data();
    r.delta.assign(size_t(c.h) * c.sq, std::numeric_limits<float>::quiet_NaN());
    a.delta = r.delta.data();
    a.h = c.h;
    a.hkv = c.hkv;
    a.d = c.d;
    a.kv_splits = c.kv_splits > 0 ? c.kv_splits : dkdv_splits_wanted(c.kind, c.sq, c.h / c.hkv);
    r.dkdv_part.assign(dkdv_partial_floats(a, a.kv_splits),
                       std::numeric_limits<float>::quiet_NaN());
    a.dkdv_partial = r.dkdv_part.empty() ? nullptr : r.dkdv_part.data();
    r.expose(a.dout, r.dout.size() * 2);
    r.expose(a.lse, r.lse.size() * 4);
    r.expose(a.delta, r.delta.size() * 4);
    bwd(a, attn_emu::as_stream(r.dev));
}

void check_case(const Case& c) {
    Rng rng(0x5eed ^ std::hash<std::string>{}(c.name));
    Inputs in;
    in.q = random_bf16(size_t(c.sq) * c.h * c.d, rng);
    in.k = random_bf16(size_t(c.sk) * c.hkv * c.d, rng);
    in.v = random_bf16(size_t(c.sk) * c.hkv * c.d, rng);
    in.dout = random_bf16(size_t(c.sq) * c.h * c.d, rng);
    in.sk_eff = c.kv_len >= 0 ? c.kv_len : c.sk;
    for (size_t i = 0; c.k_growth != 0.0 && i < in.k.size(); ++i) {
        const double f = 1.0 + c.k_growth * double(i / (size_t(c.hkv) * c.d));
        in.k[i] = bf16_to_f32(f32_to_bf16(float(in.k[i] * f)));
    }
    const Ref ref = reference(c, in);
    // Every block shape of the forward; the backward then reads the lse of the 64-row kernel and
    // of the 4 x 32-row one (the 8 x 16-row one's lse is checked here alike, at less cost).
    std::vector<FwdTile> tiles = {FwdTile::automatic};
    if (tiled_fwd(c)) tiles = {FwdTile::rows64, FwdTile::rows128, FwdTile::rows128_8w};
    for (CopyMode mode : {CopyMode::at_wait, CopyMode::at_issue}) {
        for (FwdTile tile : tiles) {
            SCOPED_TRACE(mode == CopyMode::at_wait ? "copies at wait" : "copies at issue");
            SCOPED_TRACE("forward tile " + std::to_string(static_cast<int>(tile)));
            Run r(c, in, mode);
            const bool bwd = c.bwd && tile != FwdTile::rows128_8w;
            try {
                run_fwd(c, r, tile);
                if (bwd) run_bwd(c, r);
            } catch (const std::exception& e) {
                ADD_FAILURE() << c.name << ": " << e.what();
                return;
            }
            expect_close("out", c, r.out, ref.out, 1e-2);
            for (size_t i = 0; i < ref.lse.size(); ++i) {
                if (std::isinf(ref.lse[i])) {
                    ASSERT_EQ(r.lse[i], -INFINITY)
                        << c.name << " lse[" << i << "] (head " << i / c.sq << ", row " << i % c.sq
                        << ") sees nothing";
                } else {
                    ASSERT_NEAR(r.lse[i], ref.lse[i], 1e-3)
                        << c.name << " lse[" << i << "] (head " << i / c.sq << ", row " << i % c.sq
                        << ")";
                }
            }
            if (!bwd) continue;
            expect_close("dq", c, r.dq, ref.dq, 2e-2);
            expect_close("dk", c, r.dk, ref.dk, 2e-2);
            expect_close("dv", c, r.dv, ref.dv, 2e-2);
        }
    }
}

Case causal(std::string name, int sq, int sk, int q_offset, int h, int hkv, int d, bool bwd) {
    Case c;
    c.name = std::move(name);
    c.sq = sq;
    c.sk = sk;
    c.q_offset = q_offset;
    c.h = h;
    c.hkv = hkv;
    c.d = d;
    c.bwd = bwd;
    return c;
}

TEST(AttentionEmu, CausalForwardBackward) {
    check_case(causal("causal 130 d64 g2", 130, 130, 0, 2, 1, 64, true));
    check_case(causal("causal 61 off69 d128 g1", 61, 130, 69, 2, 2, 128, true));
    check_case(causal("causal 17 d64 g8", 17, 17, 0, 8, 1, 64, true));
}

// Scores that grow along the keys (key j's K row times 1 + j / 2): each tile's maxima pass the
// last ones by hundreds of log2 units, so a running max that failed to move on a later tile (the
// wide forward rescales lazily) would overflow the exponentials.
TEST(AttentionEmu, CausalGrowingScoresForward) {
    Case c = causal("causal 260 growing scores d64 g2", 260, 260, 0, 2, 1, 64, false);
    c.k_growth = 0.5;
    check_case(c);
    c.name = "full 40x200 growing scores d128";
    c.kind = kFull;
    c.sq = 40;
    c.sk = 200;
    c.d = 128;
    check_case(c);
}

TEST(AttentionEmu, FullForwardBackward) {
    Case c = causal("full 70x33 d64", 70, 33, 0, 2, 1, 64, true);
    c.kind = kFull;
    check_case(c);
    Case empty = causal("full 20x0 d128", 20, 0, 0, 1, 1, 128, true);
    empty.kind = kFull;
    check_case(empty);
}

Case dflash(std::string name, int n, int block, int ctx, std::vector<int32_t> anchors, int h,
            int hkv, int d) {
    Case c = causal(std::move(name), n * block, ctx + n * block, 0, h, hkv, d, true);
    c.kind = kDflash;
    c.ctx = ctx;
    c.block = block;
    c.anchors = std::move(anchors);
    return c;
}

TEST(AttentionEmu, DflashBlockForwardBackward) {
    // Padding (-1), no context (0), all of it (ctx), unsorted; ctx not a multiple of the tile.
    check_case(dflash("dflash b16 ctx61", 5, 16, 61, {3, 0, 61, -1, 30}, 4, 2, 64));
    // Block size not dividing the query tile; sorted with duplicates and trailing padding.
    check_case(dflash("dflash b10 ctx33", 9, 10, 33, {1, 5, 5, 5, 17, 30, 33, -1, -1}, 2, 1, 128));
    // Whole tiles seen by every row: the unmasked context path.
    check_case(dflash("dflash b16 ctx130", 8, 16, 130, {128, 128, 129, 130, 130, 130, 130, 130}, 2,
                      2, 64));
    // The shared context tiles split over query tiles (fp32 partials, then a reduce).
    Case split = dflash("dflash b16 ctx130 3 splits", 12, 16, 130,
                        {0, 20, 40, 60, 80, 100, 120, 130, 130, 129, -1, 7}, 4, 2, 64);
    split.kv_splits = 3;
    check_case(split);
    // One-row blocks (up to 64 anchors per query tile), GQA group 4.
    std::vector<int32_t> a(70);
    for (int b = 0; b < 70; ++b) a[b] = (b * 37) % 6 - 1;  // -1 .. 4, unsorted
    check_case(dflash("dflash b1 ctx5 g4", 70, 1, 5, a, 4, 1, 128));
}

// Packed documents: block n sees context keys [starts[n], anchors[n]) only. Starts on and off
// the 64-key tiles, at 0 and at the anchor; tiles wholly inside every row's span take the
// unmasked path; the shared context tiles split over query tiles.
TEST(AttentionEmu, DflashBlockWithContextStartsForwardBackward) {
    Case edge = dflash("dflash starts b16 ctx161", 5, 16, 161, {130, 0, 161, -1, 70}, 4, 2, 64);
    edge.starts = {64, 0, 100, 5, 70};
    check_case(edge);
    Case docs = dflash("dflash starts b16 ctx200 unmasked", 8, 16, 200,
                       {190, 192, 199, 200, 200, 197, 196, 200}, 2, 2, 128);
    docs.starts = {64, 64, 64, 64, 64, 64, 60, 3};  // key tile [64, 128) is seen by every row
    check_case(docs);
    Case split = dflash("dflash starts b16 ctx130 3 splits", 12, 16, 130,
                        {0, 20, 40, 60, 80, 100, 120, 130, 130, 129, -1, 7}, 4, 2, 64);
    split.starts = {0, 0, 20, 20, 70, 70, 70, 100, 100, 129, 0, 7};
    split.kv_splits = 3;
    check_case(split);
}

Case cache(std::string name, int kind, int sq, int cap, int kv_len, int h, int hkv, int d) {
    Case c = causal(std::move(name), sq, cap, 0, h, hkv, d, false);
    c.kind = kind;
    c.kv_len = kv_len;
    return c;
}

TEST(AttentionEmu, DecodeOverKvCache) {
    check_case(cache("decode causal sq1 g8", kCausal, 1, 200, 150, 8, 1, 128));
    check_case(cache("decode causal sq16 g2", kCausal, 16, 300, 77, 4, 2, 64));
    check_case(cache("decode full sq5 g1", kFull, 5, 129, 129, 2, 2, 64));
    // Splits of 256 keys (4 tiles each), three of them.
    check_case(cache("decode causal sq7 g4 three splits", kCausal, 7, 700, 650, 8, 2, 64));
    check_case(cache("decode causal sq16 g8 two row blocks", kCausal, 16, 100, 40, 8, 1, 64));
    // Splits of 256 keys and kv_len 266: the last split holds 10 keys, and the first 6 queries see
    // none of them (a partial with max -inf and sum 0).
    check_case(cache("decode causal sq16 short last split", kCausal, 16, 700, 266, 2, 2, 64));
    check_case(cache("decode kv_len 0", kFull, 3, 64, 0, 2, 1, 64));
    // 71 splits of 64 keys, 68 of them active: the merge's lanes hold three splits each, and its
    // batches of eight end inside the last one.
    check_case(cache("decode causal sq2 g2 68 active splits", kCausal, 2, 4500, 4300, 4, 2, 64));
    Case plain = cache("decode causal no kv_len", kCausal, 4, 90, -1, 4, 1, 128);
    plain.q_offset = 50;
    check_case(plain);
}

// Row invariance (attention_tiles.h): each of Sq verified rows over a cache of kv keys gives the
// bits (out and lse) of the same query decoded alone at its position.
void expect_verified_rows_equal_decoded(int sq, int cap, int kv, int h, int hkv, int d, int window,
                                        const std::vector<float>& sinks, uint64_t seed) {
    Rng rng(seed);
    Inputs in;
    in.q = random_bf16(size_t(sq) * h * d, rng);
    in.k = random_bf16(size_t(cap) * hkv * d, rng);
    in.v = random_bf16(size_t(cap) * hkv * d, rng);
    in.dout = std::vector<float>(in.q.size(), 0.0f);
    in.sk_eff = kv;
    Case verify = cache("verify", kCausal, sq, cap, kv, h, hkv, d);
    verify.window = window;
    verify.sinks = sinks;
    attn::Run rv(verify, in, CopyMode::at_wait);
    run_fwd(verify, rv);
    for (int i = 0; i < sq; ++i) {
        Case one = cache("decode", kCausal, 1, cap, kv - sq + i + 1, h, hkv, d);
        one.window = window;
        one.sinks = sinks;
        Inputs di = in;
        di.q.assign(in.q.begin() + size_t(i) * h * d, in.q.begin() + size_t(i + 1) * h * d);
        di.dout.assign(di.q.size(), 0.0f);
        di.sk_eff = one.kv_len;
        attn::Run rd(one, di, CopyMode::at_wait);
        run_fwd(one, rd);
        for (int e = 0; e < h * d; ++e)
            ASSERT_EQ(rd.out.data()[e], rv.out.data()[size_t(i) * h * d + e])
                << "d " << d << " window " << window << " row " << i << " (position " << kv - sq + i
                << "), element " << e;
        for (int hh = 0; hh < h; ++hh)
            ASSERT_EQ(rd.lse[hh], rv.lse[size_t(hh) * sq + i]) << "row " << i << " head " << hh;
    }
}

// A query verified with 8 others, across a split boundary (capacity 700: splits of 256 keys; the
// rows sit at positions 508..516).
TEST(AttentionEmu, DecodedRowsEqualVerifiedRowsBitForBit) {
    expect_verified_rows_equal_decoded(9, 700, 517, 4, 2, 64, 0, {}, 11);
    // More splits than a warp has lanes.
    expect_verified_rows_equal_decoded(5, 2500, 2421, 2, 1, 64, 0, {}, 12);
}

TEST(AttentionEmu, PrefillOverKvCache) {
    Case c = cache("prefill causal sq40 kv130", kCausal, 40, 200, 130, 2, 1, 64);
    c.bwd = true;
    check_case(c);
    Case f = cache("prefill full sq33 kv70 g4 d128", kFull, 33, 100, 70, 4, 1, 128);
    f.bwd = true;
    check_case(f);
}

// ---- sliding windows and sinks (gpt-oss) ------------------------------------------------------

std::vector<float> some_sinks(int h) {
    std::vector<float> s(h);
    for (int i = 0; i < h; ++i) s[i] = 1.5f - 0.75f * i;  // above and below the rows' scores
    return s;
}

Case with_window(Case c, int window) {
    c.window = window;
    return c;
}

// Windows of 3 and 70 keys over 200 rows (tiles below the window skipped, the boundary tile
// masked), a window over a query offset, and a window longer than the sequence. Window 1: each
// row sees itself only, so its gradients are rounding noise around 0, which a relative error
// cannot judge; the backward is checked with window 2.
TEST(AttentionEmu, CausalWindowForwardBackward) {
    check_case(with_window(causal("causal 200 window 3 d64 g2", 200, 200, 0, 2, 1, 64, true), 3));
    check_case(
        with_window(causal("causal 130 off 69 window 70 d128", 130, 199, 69, 2, 2, 128, true), 70));
    check_case(with_window(causal("causal 65 window 1 d64 g4", 65, 65, 0, 4, 1, 64, false), 1));
    check_case(with_window(causal("causal 65 window 2 d64 g4", 65, 65, 0, 4, 1, 64, true), 2));
    check_case(with_window(causal("causal 70 window 500 d64", 70, 70, 0, 2, 1, 64, true), 500));
}

// Sinks in the FlashAttention-2 kernel on every mask kind (rows of padding blocks see nothing:
// out 0, lse = the sink), and with a window.
TEST(AttentionEmu, SinksForward) {
    Case c = causal("causal 70 sinks d64 g2", 70, 70, 0, 4, 2, 64, false);
    c.sinks = some_sinks(4);
    check_case(c);
    c.name = "causal 90 window 20 sinks d128";
    c.sq = c.sk = 90;
    c.d = 128;
    c.window = 20;
    check_case(c);
    Case f = causal("full 33x70 sinks d64", 33, 70, 0, 2, 1, 64, false);
    f.kind = kFull;
    f.sinks = some_sinks(2);
    check_case(f);
    Case d = dflash("dflash b16 ctx61 sinks", 5, 16, 61, {3, 0, 61, -1, 30}, 4, 2, 64);
    d.bwd = false;
    d.sinks = some_sinks(4);
    check_case(d);
}

// The decode path over a KV cache with a window (splits below it exit, the combine starts at the
// first split with a visible key) and sinks (joined once at the merge), Dh 64 (gpt-oss: GQA 8)
// and 128; a cache of 0 keys gives out 0 and lse = the sink.
TEST(AttentionEmu, DecodeOverKvCacheWithWindowAndSinks) {
    struct Shape {
        const char* name;
        int sq, cap, kv, h, hkv, d, window;
    };
    const Shape shapes[] = {
        {"decode sq1 g8 window 128 three splits", 1, 700, 650, 8, 1, 64, 128},
        {"decode sq16 g8 window 128", 16, 700, 517, 8, 1, 64, 128},
        {"decode sq16 window 3 d128", 16, 300, 200, 4, 2, 128, 3},
        {"decode sq7 window 1", 7, 129, 100, 2, 1, 64, 1},
        {"decode sq5 window past the start", 5, 200, 60, 2, 2, 64, 128},
        {"decode sq9 window 300 over splits", 9, 1000, 900, 2, 1, 128, 300},
    };
    for (const Shape& sh : shapes) {
        Case c = cache(sh.name, kCausal, sh.sq, sh.cap, sh.kv, sh.h, sh.hkv, sh.d);
        c.window = sh.window;
        c.sinks = some_sinks(sh.h);
        check_case(c);
        c.name += " no sinks";
        c.sinks.clear();
        check_case(c);
    }
    Case empty = cache("decode full kv_len 0 sinks", kFull, 3, 64, 0, 2, 1, 64);
    empty.sinks = some_sinks(2);
    check_case(empty);
}

// Row invariance with a window and sinks: each of 16 verified rows equals, bit for bit, the same
// row decoded alone, though the block's first query reaches splits and tiles the later rows see
// nothing of (capacity 700: splits of 256 keys; positions 500..515, window 128 and 3).
TEST(AttentionEmu, WindowedDecodedRowsWithSinksEqualVerifiedRowsBitForBit) {
    for (int d : {64, 128}) {
        for (int window : {128, 3})
            expect_verified_rows_equal_decoded(16, 700, 516, 8, 1, d, window, some_sinks(8),
                                               uint64_t(13 + d + window));
    }
}

TEST(AttentionEmu, PrefillOverKvCacheWithWindow) {
    Case c = cache("prefill causal sq40 kv130 window 50", kCausal, 40, 200, 130, 2, 1, 64);
    c.window = 50;
    c.bwd = true;
    check_case(c);
    c.name += " sinks";
    c.bwd = false;
    c.sinks = some_sinks(2);
    check_case(c);
}

// Head dim 256 (the hybrid families' gated attention and their drafters): the tiled forward
// (causal, full, a window with sinks), the split-KV decode over three splits with GQA 8, and its
// row invariance.
TEST(AttentionEmu, HeadDim256ForwardAndDecode) {
    check_case(causal("causal 130 d256 g2", 130, 130, 0, 4, 2, 256, false));
    check_case(causal("full 33x70 d256", 33, 70, 0, 2, 1, 256, false));
    Case w = causal("causal 90 window 20 sinks d256", 90, 90, 0, 2, 1, 256, false);
    w.window = 20;
    w.sinks = some_sinks(2);
    check_case(w);
    check_case(cache("decode causal sq1 g8 d256", kCausal, 1, 700, 650, 8, 1, 256));
    check_case(cache("verify causal sq16 g2 d256", kCausal, 16, 300, 77, 4, 2, 256));
    check_case(cache("prefill causal sq40 kv130 d256", kCausal, 40, 200, 130, 2, 1, 256));
    expect_verified_rows_equal_decoded(5, 700, 517, 4, 2, 256, 0, {}, 17);
}

// Head dim 256's backward (Note [Head dim 256 backward]: a dV launch and a dK launch, 16 query rows
// a step): causal over two tiles with GQA 2, a window, and a drafter's DFlash block mask whose
// shared context tiles split over query tiles (fp32 partials of each launch, then the reduce).
TEST(AttentionEmu, HeadDim256Backward) {
    check_case(causal("causal 70 d256 g2 bwd", 70, 70, 0, 4, 2, 256, true));
    Case w = causal("causal 90 window 20 d256 bwd", 90, 90, 0, 2, 1, 256, true);
    w.window = 20;
    check_case(w);
    Case split = dflash("dflash b16 ctx130 2 splits d256", 8, 16, 130,
                        {0, 20, 64, 100, 130, 129, -1, 7}, 2, 1, 256);
    split.kv_splits = 2;
    check_case(split);
}

}  // namespace
}  // namespace dflash::cuda::attn

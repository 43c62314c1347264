// CUDA attention (backend/cuda/attention.cpp + kernels/attention_*.cu) against the CPU backend,
// which runs in f32 on the same bf16-rounded inputs. Every mask kind forward (and backward for
// causal, full and dflash_block, the last with drafter windows too) on awkward sizes: Sq/Sk not
// multiples of the 64-row tiles, head dims 64 and 128, GQA groups 1/2/4/8, causal with q_offset,
// dflash with padding blocks, anchor 0, duplicate anchors, ctx_len not a multiple of the tile and
// per-block context starts (packed documents), decoding over a KV cache with kv_len below the
// capacity (rows past kv_len hold NaN: they must never be read) for Sq = 1 and 16, and bitwise
// determinism of the backward (and forward) over two runs. Causal sliding windows (window 128 over
// 300+ tokens, 3, 1; prefill forward and backward, decode and verify over a cache) and per-head
// sinks (forward, every path), head dims 64 (gpt-oss: H 64, Hkv 8) and 128, and head dim 256 (the
// hybrid families' gated attention and their drafters; forward and backward), with the same
// tolerances; a row decoded alone equals it verified in a 16-row block bit for bit with a window
// and sinks, and a graph-recorded decode with a window and sinks gives the eager bits at every
// cache length it replays for. Outputs are poisoned with NaN first, so unwritten elements fail.
// Tolerances: out (bf16) relative L2 error <= 1e-2 and every element within 3e-2 (1 + |ref|);
// lse (f32) within 2e-3, exactly -inf where a row sees nothing; dq/dk/dv (bf16, from bf16 P and
// dS on the tensor cores) relative L2 error <= 2e-2 and every element within 3e-2 (|ref| + rms).
// Skips visibly without a GPU. The kernels' logic is also checked on the CPU by
// tests/ops/attention_emu_test.cpp, the tile arithmetic by tests/ops/attention_tiles_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/backend_factory.h"
#include "backend/device_tensor.h"
#include "core/rng.h"
#include "support/test_util.h"

namespace dflash {
namespace {

#define REQUIRE_CUDA_DEVICE()                 \
    do {                                      \
        if (cuda_device_count() == 0) {       \
            GTEST_SKIP() << "no CUDA device"; \
        }                                     \
    } while (0)

constexpr float kNan = std::numeric_limits<float>::quiet_NaN();

struct Case {
    std::string name;
    int64_t sq = 0, sk = 0, h = 1, hkv = 1, d = 64;
    AttnMaskKind kind = AttnMaskKind::causal;
    int64_t q_offset = 0;
    int64_t ctx = 0, block = 1;
    std::vector<int32_t> anchors;
    std::vector<int32_t> starts;  // dflash context starts (empty: none)
    int64_t kv_len = -1;          // -1: no kv_len
    int64_t window = 0;           // causal or drafter (dflash) sliding window (0: none)
    bool causal_block = false;    // dflash: causal blocks (sliding drafter layers)
    bool sinks = false;           // per-head sink logits (forward only)
    bool bwd = false;

    std::string describe() const {
        std::ostringstream os;
        os << name << " [Sq=" << sq << " Sk=" << sk << " H=" << h << " Hkv=" << hkv << " Dh=" << d;
        if (kind == AttnMaskKind::causal) os << " causal q_offset=" << q_offset;
        if (kind == AttnMaskKind::full) os << " full";
        if (kind == AttnMaskKind::dflash_block) os << " dflash ctx=" << ctx << " B=" << block;
        if (!starts.empty()) os << " ctx_start";
        if (kv_len >= 0) os << " kv_len=" << kv_len;
        if (window > 0) os << " window=" << window;
        if (causal_block) os << " causal_block";
        if (sinks) os << " sinks";
        os << "]";
        return os.str();
    }
};

Case make(std::string name, AttnMaskKind kind, int64_t sq, int64_t sk, int64_t h, int64_t hkv,
          int64_t d, bool bwd) {
    Case c;
    c.name = std::move(name);
    c.kind = kind;
    c.sq = sq;
    c.sk = sk;
    c.h = h;
    c.hkv = hkv;
    c.d = d;
    c.bwd = bwd;
    return c;
}

// ---- host data -------------------------------------------------------------------------------
HostTensor random_bf16_values(Shape shape, Rng& rng) {
    HostTensor t(shape, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = bf16_to_f32(f32_to_bf16(rng.normal()));
    return t;
}

HostTensor filled(Shape shape, float value) {
    HostTensor t(shape, DType::f32);
    fill_f32(t.view(), value);
    return t;
}

// A device tensor of dtype `dt` holding `host` (f32), converted.
DeviceTensor upload(Backend& be, const HostTensor& host, DType dt) {
    DeviceTensor t(be, host.shape(), dt);
    from_host_f32(be, t, host.view());
    return t;
}

DeviceTensor upload_i32(Backend& be, const HostTensor& host) {
    DeviceTensor t(be, host.shape(), DType::i32);
    be.upload(t, host.view());
    be.synchronize();
    return t;
}

// ---- comparison ------------------------------------------------------------------------------
// Element index of an [S, heads, Dh] tensor (or [H, Sq] lse) as text.
std::string where(const Shape& s, int64_t i) {
    std::ostringstream os;
    if (s.rank() == 3) {
        os << "(row " << i / (s[1] * s[2]) << ", head " << (i / s[2]) % s[1] << ", d " << i % s[2]
           << ")";
    } else {
        os << "(head " << i / s[1] << ", row " << i % s[1] << ")";
    }
    return os.str();
}

// rel L2 error <= rel_tol and every element within scale * (|ref| + floor), where floor is 1 (out,
// scale 3e-2) or the reference's rms (gradients, scale 0.1: a gradient element sums many bf16
// products, so single elements stray further than the norm; a wrong sign, a missing or doubled
// contribution is still off by about |ref|). A reference that is ~0 everywhere (one key: softmax
// has no gradient) is compared on an absolute 1e-4 per element.
void expect_close(const std::string& what, const HostTensor& got, const HostTensor& ref,
                  double rel_tol, bool floor_is_rms) {
    double num = 0, den = 0, worst = 0;
    int64_t worst_at = 0, first_bad = -1, nans = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) den += double(ref.f32()[i]) * ref.f32()[i];
    const double n = static_cast<double>(std::max<int64_t>(1, ref.numel()));
    const double rms = std::sqrt(den / n);
    const double floor = floor_is_rms ? std::max(rms, 1e-4) : 1.0;
    const double scale = floor_is_rms ? 0.1 : 3e-2;
    den = std::max(den, 1e-8 * n);
    for (int64_t i = 0; i < ref.numel(); ++i) {
        const double x = got.f32()[i], y = ref.f32()[i], e = std::fabs(x - y);
        if (std::isnan(x)) ++nans;
        if (!(e <= scale * (std::fabs(y) + floor)) && first_bad < 0) first_bad = i;
        if (!(e <= worst)) {
            worst = e;
            worst_at = i;
        }
        num += (x - y) * (x - y);
    }
    const double rel = std::sqrt(num / den);
    std::ostringstream os;
    os << what << ": rel L2 error " << rel << " (tol " << rel_tol << "), max abs error " << worst
       << " at " << worst_at << " " << where(ref.shape(), worst_at) << " got "
       << got.f32()[worst_at] << " want " << ref.f32()[worst_at] << "; " << nans << " NaN; ";
    if (first_bad >= 0) {
        os << "first element out of tolerance " << first_bad << " " << where(ref.shape(), first_bad)
           << " got " << got.f32()[first_bad] << " want " << ref.f32()[first_bad];
    } else {
        os << "every element within tolerance";
    }
    EXPECT_TRUE(rel <= rel_tol && first_bad < 0) << os.str();
}

void expect_lse_close(const HostTensor& got, const HostTensor& ref) {
    for (int64_t i = 0; i < ref.numel(); ++i) {
        const float x = got.f32()[i], y = ref.f32()[i];
        if (std::isinf(y)) {
            ASSERT_EQ(x, -INFINITY) << "lse " << where(ref.shape(), i) << " sees no key";
        } else {
            ASSERT_NEAR(x, y, 2e-3) << "lse " << where(ref.shape(), i);
        }
    }
}

// ---- one case ----------------------------------------------------------------------------------
struct Backends {
    std::unique_ptr<Backend> cpu = make_cpu_backend(1);
    std::unique_ptr<Backend> gpu = make_backend(DeviceKind::cuda, 0, 1);
};

struct Problem {
    HostTensor q, k, v, dout, anchors, starts, kv_len, sinks;
    HostTensor k_gpu, v_gpu;  // K/V with NaN past kv_len
};

// Sink logits around the scores' scale (|x| ~ 1): some dominate a row, some barely count.
HostTensor sink_values(int64_t h, Rng& rng) {
    HostTensor t({h}, DType::f32);
    for (int64_t i = 0; i < h; ++i) t.f32()[i] = 2.0f * rng.normal();
    return t;
}

Problem make_problem(const Case& c) {
    Rng rng(0xa77e ^ std::hash<std::string>{}(c.name));
    Problem p;
    p.q = random_bf16_values({c.sq, c.h, c.d}, rng);
    p.k = random_bf16_values({c.sk, c.hkv, c.d}, rng);
    p.v = random_bf16_values({c.sk, c.hkv, c.d}, rng);
    p.dout = random_bf16_values({c.sq, c.h, c.d}, rng);
    p.k_gpu = p.k.clone();
    p.v_gpu = p.v.clone();
    if (c.kv_len >= 0) {
        const int64_t from = c.kv_len * c.hkv * c.d;
        for (int64_t i = from; i < p.k.numel(); ++i) p.k_gpu.f32()[i] = p.v_gpu.f32()[i] = kNan;
        p.kv_len = HostTensor::from_i32({1}, {static_cast<int32_t>(c.kv_len)});
    }
    if (c.kind == AttnMaskKind::dflash_block) {
        p.anchors = HostTensor::from_i32({static_cast<int64_t>(c.anchors.size())}, c.anchors);
        if (!c.starts.empty())
            p.starts = HostTensor::from_i32({static_cast<int64_t>(c.starts.size())}, c.starts);
    }
    if (c.sinks) p.sinks = sink_values(c.h, rng);
    return p;
}

AttnMask mask_of(const Case& c, const Tensor& anchors, const Tensor& kv_len,
                 const Tensor& starts = Tensor(), const Tensor& sinks = Tensor()) {
    AttnMask m;
    switch (c.kind) {
        case AttnMaskKind::causal:
            m = c.kv_len >= 0 ? AttnMask::over_cache(c.kind, kv_len) : AttnMask::causal(c.q_offset);
            break;
        case AttnMaskKind::full:
            m = c.kv_len >= 0 ? AttnMask::over_cache(c.kind, kv_len) : AttnMask::full();
            break;
        case AttnMaskKind::dflash_block:
            m = AttnMask::dflash_block(c.ctx, c.block, anchors, starts);
            break;
    }
    if (c.kind == AttnMaskKind::dflash_block) m = m.with_causal_block(c.causal_block);
    return m.with_window(c.window).with_sinks(sinks);
}

struct GpuRun {
    DeviceTensor out, lse, dq, dk, dv;
};

struct GpuInputs {
    DeviceTensor q, k, v, dout, anchors, starts, kv_len, sinks;
    AttnMask mask;
};

GpuInputs gpu_inputs(Backend& gpu, const Case& c, const Problem& p) {
    GpuInputs g;
    g.q = upload(gpu, p.q, DType::bf16);
    g.k = upload(gpu, p.k_gpu, DType::bf16);
    g.v = upload(gpu, p.v_gpu, DType::bf16);
    g.dout = upload(gpu, p.dout, DType::bf16);
    if (!p.anchors.empty()) g.anchors = upload_i32(gpu, p.anchors);
    if (!p.starts.empty()) g.starts = upload_i32(gpu, p.starts);
    if (!p.kv_len.empty()) g.kv_len = upload_i32(gpu, p.kv_len);
    if (!p.sinks.empty()) g.sinks = upload(gpu, p.sinks, DType::f32);
    g.mask = mask_of(c, g.anchors.view(), g.kv_len.view(), g.starts.view(), g.sinks.view());
    return g;
}

GpuRun gpu_run(Backend& gpu, const Case& c, const GpuInputs& in) {
    GpuRun r;
    r.out = upload(gpu, filled({c.sq, c.h, c.d}, kNan), DType::bf16);
    r.lse = upload(gpu, filled({c.h, c.sq}, kNan), DType::f32);
    gpu.attention_fwd(in.q, in.k, in.v, in.mask, r.out, r.lse);
    if (c.bwd) {
        r.dq = upload(gpu, filled({c.sq, c.h, c.d}, kNan), DType::bf16);
        r.dk = upload(gpu, filled({c.sk, c.hkv, c.d}, kNan), DType::bf16);
        r.dv = upload(gpu, filled({c.sk, c.hkv, c.d}, kNan), DType::bf16);
        gpu.attention_bwd(in.dout, in.q, in.k, in.v, r.out, r.lse, in.mask, r.dq, r.dk, r.dv);
    }
    gpu.synchronize();
    return r;
}

bool same_bits(Backend& gpu, const Tensor& a, const Tensor& b) {
    HostTensor x(a.shape(), a.dtype()), y(b.shape(), b.dtype());
    gpu.download(x.view(), a);
    gpu.download(y.view(), b);
    return std::memcmp(x.view().data(), y.view().data(), x.nbytes()) == 0;
}

void check_case(Backends& be, const Case& c, bool twice = false) {
    SCOPED_TRACE(c.describe());
    const Problem p = make_problem(c);
    const AttnMask cmask =
        mask_of(c, p.anchors.view(), p.kv_len.view(), p.starts.view(), p.sinks.view());
    HostTensor out({c.sq, c.h, c.d}), lse({c.h, c.sq});
    be.cpu->attention_fwd(p.q, p.k, p.v, cmask, out, lse);

    const GpuInputs in = gpu_inputs(*be.gpu, c, p);
    const GpuRun r = gpu_run(*be.gpu, c, in);
    expect_close("out", to_host_f32(*be.gpu, r.out), out, 1e-2, false);
    expect_lse_close(to_host_f32(*be.gpu, r.lse), lse);
    if (c.bwd) {
        HostTensor dq({c.sq, c.h, c.d}), dk({c.sk, c.hkv, c.d}), dv({c.sk, c.hkv, c.d});
        be.cpu->attention_bwd(p.dout, p.q, p.k, p.v, out, lse, cmask, dq, dk, dv);
        expect_close("dq", to_host_f32(*be.gpu, r.dq), dq, 2e-2, true);
        expect_close("dk", to_host_f32(*be.gpu, r.dk), dk, 2e-2, true);
        expect_close("dv", to_host_f32(*be.gpu, r.dv), dv, 2e-2, true);
    }
    if (twice) {  // the same inputs give the same bits
        const GpuRun r2 = gpu_run(*be.gpu, c, in);
        EXPECT_TRUE(same_bits(*be.gpu, r.out, r2.out)) << "forward out differs between runs";
        EXPECT_TRUE(same_bits(*be.gpu, r.lse, r2.lse)) << "forward lse differs between runs";
        if (c.bwd) {
            EXPECT_TRUE(same_bits(*be.gpu, r.dq, r2.dq)) << "dq differs between runs";
            EXPECT_TRUE(same_bits(*be.gpu, r.dk, r2.dk)) << "dk differs between runs";
            EXPECT_TRUE(same_bits(*be.gpu, r.dv, r2.dv)) << "dv differs between runs";
        }
    }
}

// ---- the cases
// -----------------------------------------------------------------------------------
TEST(AttentionCuda, CausalForwardBackward) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    const AttnMaskKind k = AttnMaskKind::causal;
    check_case(be, make("causal 1", k, 1, 1, 2, 1, 64, true));
    check_case(be, make("causal 7", k, 7, 7, 4, 2, 128, true));
    check_case(be, make("causal 61 g8", k, 61, 61, 8, 1, 64, true));
    check_case(be, make("causal 130", k, 130, 130, 2, 2, 128, true));
    check_case(be, make("causal 333", k, 333, 333, 4, 2, 64, true));
    Case off = make("causal 61 q_offset 69", k, 61, 130, 4, 4, 128, true);
    off.q_offset = 69;
    check_case(be, off);
    Case off2 = make("causal 130 q_offset 150", k, 130, 333, 2, 1, 64, true);
    off2.q_offset = 150;
    check_case(be, off2);
    Case big = make("causal 1024 g4", k, 1024, 1024, 8, 2, 128, true);
    check_case(be, big);
}

TEST(AttentionCuda, FullForwardBackward) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    const AttnMaskKind k = AttnMaskKind::full;
    check_case(be, make("full 7x333 g4", k, 7, 333, 4, 1, 128, false));
    check_case(be, make("full 130x61", k, 130, 61, 2, 2, 64, true));
    check_case(be, make("full 333x130 g2", k, 333, 130, 4, 2, 128, true));
}

Case dflash(std::string name, int64_t n, int64_t block, int64_t ctx, std::vector<int32_t> anchors,
            int64_t h, int64_t hkv, int64_t d) {
    Case c = make(std::move(name), AttnMaskKind::dflash_block, n * block, ctx + n * block, h, hkv,
                  d, true);
    c.ctx = ctx;
    c.block = block;
    c.anchors = std::move(anchors);
    return c;
}

TEST(AttentionCuda, DflashBlockForwardBackward) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    // Padding (-1), no context (0), all of it (ctx), unsorted; ctx not a multiple of the tile.
    const std::vector<int32_t> edge = {3, 0, 61, -1, 30};
    check_case(be, dflash("dflash edge d64", 5, 16, 61, edge, 4, 2, 64));
    check_case(be, dflash("dflash edge d128", 5, 16, 61, edge, 4, 2, 128));
    // Training-like: sorted anchors with duplicates, two trailing padding blocks.
    std::vector<int32_t> sorted(32);
    Rng rng(11);
    for (auto& a : sorted) a = static_cast<int32_t>(1 + rng.below(333));
    std::sort(sorted.begin(), sorted.end());
    sorted[5] = sorted[6] = sorted[4];
    sorted[30] = sorted[31] = -1;
    check_case(be, dflash("dflash sorted 32x16", 32, 16, 333, sorted, 8, 2, 128));
    // Block size not dividing the 64-row tile, GQA group 8, random anchors.
    std::vector<int32_t> rnd(13);
    for (auto& a : rnd) a = static_cast<int32_t>(rng.below(132)) - 1;
    check_case(be, dflash("dflash b10 g8", 13, 10, 130, rnd, 8, 1, 64));
    // Enough query tiles that the context key tiles' dK/dV are split (fp32 partials + reduce).
    std::vector<int32_t> many(128);
    for (auto& a : many) a = static_cast<int32_t>(rng.below(501));
    std::sort(many.begin(), many.end());
    check_case(be, dflash("dflash 128x16 split dK/dV", 128, 16, 500, many, 8, 2, 128));
    // Nothing visible at all.
    check_case(be, dflash("dflash all padding", 4, 16, 64, {-1, -1, -1, -1}, 2, 1, 128));
}

// Packed documents (AttnMask::ctx_start): block n sees context [starts[n], anchors[n]) only.
// Starts on and off the 64-key tiles, at 0 and at the anchor, training-like sorted anchors with
// documents of a few hundred rows, and enough query tiles to split the context's dK/dV.
TEST(AttentionCuda, DflashBlockWithContextStartsForwardBackward) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    Case edge = dflash("dflash starts edge", 5, 16, 161, {130, 0, 161, -1, 70}, 4, 2, 128);
    edge.starts = {64, 0, 100, 0, 70};
    check_case(be, edge);
    // Four documents of 120 rows each; each block sees its own document's rows before it.
    std::vector<int32_t> anchors(96), starts(96);
    Rng rng(21);
    for (size_t b = 0; b < anchors.size(); ++b) anchors[b] = static_cast<int32_t>(rng.below(480));
    std::sort(anchors.begin(), anchors.end());
    for (size_t b = 0; b < anchors.size(); ++b) starts[b] = anchors[b] / 120 * 120;
    Case docs = dflash("dflash starts documents", 96, 16, 480, anchors, 8, 2, 128);
    docs.starts = starts;
    check_case(be, docs);
    Case d64 = dflash("dflash starts d64 b10", 13, 10, 130, {}, 8, 1, 64);
    for (int b = 0; b < 13; ++b) {
        d64.anchors.push_back(static_cast<int32_t>(rng.below(132)) - 1);
        d64.starts.push_back(static_cast<int32_t>(rng.below(std::max(d64.anchors.back(), 0) + 1)));
    }
    check_case(be, d64);
}

// Sliding-window drafter layers (AttnMask dflash_block with a window and causal blocks): windows
// under a block, under a tile and over several, causal blocks or not, training-like sorted
// anchors over a context of several tiles (the window skips its low tiles), context starts, and
// enough query tiles to split the context's dK/dV.
TEST(AttentionCuda, DflashBlockWithDrafterWindowForwardBackward) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    Rng rng(31);
    std::vector<int32_t> sorted(32);
    for (auto& a : sorted) a = static_cast<int32_t>(rng.below(700));
    std::sort(sorted.begin(), sorted.end());
    sorted[31] = -1;
    for (int64_t window : {3, 40, 200}) {
        for (bool causal : {true, false}) {
            Case c = dflash("dflash window", 32, 16, 700, sorted, 8, 2, 128);
            c.window = window;
            c.causal_block = causal;
            check_case(be, c);
        }
    }
    Case edge = dflash("dflash window edge d64", 5, 16, 161, {130, 0, 161, -1, 70}, 4, 2, 64);
    edge.starts = {64, 0, 100, 0, 70};
    edge.window = 17;
    edge.causal_block = true;
    check_case(be, edge);
    std::vector<int32_t> many(128);
    for (auto& a : many) a = static_cast<int32_t>(rng.below(2049));
    std::sort(many.begin(), many.end());
    Case split = dflash("dflash window split dK/dV", 128, 16, 2048, many, 8, 2, 128);
    split.window = 512;
    split.causal_block = true;
    check_case(be, split);
}

Case cache(std::string name, AttnMaskKind kind, int64_t sq, int64_t cap, int64_t kv_len, int64_t h,
           int64_t hkv, int64_t d) {
    Case c = make(std::move(name), kind, sq, cap, h, hkv, d, false);
    c.kv_len = kv_len;
    return c;
}

TEST(AttentionCuda, DecodeOverKvCache) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    const AttnMaskKind causal = AttnMaskKind::causal, full = AttnMaskKind::full;
    check_case(be, cache("decode sq1", causal, 1, 1000, 333, 32, 8, 128));
    check_case(be, cache("verify sq16 full cache", causal, 16, 1000, 1000, 32, 8, 128));
    check_case(be, cache("verify sq16 g8 kv16", causal, 16, 1000, 16, 8, 1, 64));
    check_case(be, cache("full sq5", full, 5, 1000, 777, 4, 4, 64));
    check_case(be, cache("decode kv_len 1", causal, 1, 1000, 1, 8, 2, 128));
    check_case(be, cache("verify sq16 long", causal, 16, 32768, 20000, 32, 8, 128));
}

TEST(AttentionCuda, PrefillOverKvCache) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    Case c = cache("prefill sq61", AttnMaskKind::causal, 61, 400, 200, 4, 2, 128);
    c.bwd = true;
    check_case(be, c);
}

TEST(AttentionCuda, Deterministic) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    check_case(be, make("causal 333 twice", AttnMaskKind::causal, 333, 333, 4, 2, 128, true), true);
    std::vector<int32_t> anchors(24);
    for (int i = 0; i < 24; ++i) anchors[i] = i * 10;
    check_case(be, dflash("dflash twice", 24, 16, 250, anchors, 8, 2, 128), true);
    check_case(be, cache("decode twice", AttnMaskKind::causal, 16, 4096, 3000, 32, 8, 128), true);
}

// ---- sliding windows and sinks (gpt-oss) ------------------------------------------------------

Case windowed(Case c, int64_t window, bool sinks) {
    c.window = window;
    c.sinks = sinks;
    return c;
}

// Prefill: the tiled kernel skips key tiles below each query tile's window and masks the boundary
// tiles; the backward takes the window too. Window 128 over 300+ tokens (gpt-oss), 3 and 1.
TEST(AttentionCuda, CausalWindowForwardBackward) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    const AttnMaskKind k = AttnMaskKind::causal;
    check_case(be, windowed(make("causal 333 w128 gpt-oss heads", k, 333, 333, 64, 8, 64, true),
                            128, false));
    check_case(be,
               windowed(make("causal 333 w128 d128", k, 333, 333, 4, 2, 128, true), 128, false));
    check_case(be, windowed(make("causal 301 w3", k, 301, 301, 8, 1, 64, true), 3, false));
    check_case(be, windowed(make("causal 130 w1 d128", k, 130, 130, 2, 2, 128, true), 1, false));
    Case off =
        windowed(make("causal 130 q_offset 150 w100", k, 130, 333, 4, 2, 64, true), 100, false);
    off.q_offset = 150;
    check_case(be, off);
    check_case(be, windowed(make("causal 70 w1000", k, 70, 70, 2, 1, 64, true), 1000, false));
    check_case(be,
               windowed(make("causal 1024 w128 twice", k, 1024, 1024, 8, 2, 128, true), 128, false),
               true);
}

// Sinks in the forward of every path and mask kind (dflash padding blocks: out 0, lse = sink).
TEST(AttentionCuda, SinksForward) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    const AttnMaskKind k = AttnMaskKind::causal;
    check_case(
        be, windowed(make("causal 333 w128 sinks d64", k, 333, 333, 64, 8, 64, false), 128, true));
    check_case(be, windowed(make("causal 130 sinks d128", k, 130, 130, 4, 2, 128, false), 0, true));
    check_case(be, windowed(make("causal 300 w3 sinks", k, 300, 300, 8, 1, 64, false), 3, true));
    check_case(be, windowed(make("full 7x333 sinks", AttnMaskKind::full, 7, 333, 4, 1, 128, false),
                            0, true));
    check_case(be, windowed(make("full 130x61 sinks", AttnMaskKind::full, 130, 61, 2, 2, 64, false),
                            0, true));
    Case d = dflash("dflash edge sinks", 5, 16, 61, {3, 0, 61, -1, 30}, 4, 2, 64);
    d.bwd = false;
    d.sinks = true;
    check_case(be, d);
}

// Decoding and verifying over a cache: splits below the window exit at once, the merge starts at
// the first split with a visible key and adds the sink once.
TEST(AttentionCuda, DecodeOverKvCacheWithWindowAndSinks) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    const AttnMaskKind causal = AttnMaskKind::causal;
    for (bool sinks : {false, true}) {
        check_case(be, windowed(cache("decode w128 gpt-oss", causal, 1, 4096, 3000, 64, 8, 64), 128,
                                sinks));
        check_case(be, windowed(cache("verify16 w128 gpt-oss", causal, 16, 4096, 3001, 64, 8, 64),
                                128, sinks));
        check_case(
            be, windowed(cache("verify16 w3 d128", causal, 16, 1000, 333, 32, 8, 128), 3, sinks));
        check_case(be, windowed(cache("decode w128 short cache", causal, 1, 1000, 50, 8, 1, 64),
                                128, sinks));
        check_case(be, windowed(cache("verify16 w128 long", causal, 16, 32768, 20000, 64, 8, 64),
                                128, sinks));
        check_case(be, windowed(cache("decode w1", causal, 1, 1000, 777, 8, 2, 128), 1, sinks));
    }
    check_case(
        be, windowed(cache("full sq5 sinks", AttnMaskKind::full, 5, 1000, 777, 4, 4, 64), 0, true));
    check_case(be, windowed(cache("full kv_len 0 sinks", AttnMaskKind::full, 3, 1000, 0, 4, 4, 64),
                            0, true));
    Case pre = windowed(cache("prefill sq61 w50", causal, 61, 400, 200, 4, 2, 128), 50, false);
    pre.bwd = true;
    check_case(be, pre);
    check_case(be,
               windowed(cache("prefill sq61 w50 sinks", causal, 61, 400, 200, 4, 2, 64), 50, true));
}

// One forward over the cache [cap, Hkv, Dh] with the last Sq = q rows' queries at its end.
HostTensor forward_over_cache(Backend& gpu, const DeviceTensor& q, const DeviceTensor& k,
                              const DeviceTensor& v, const DeviceTensor& kv_len,
                              const DeviceTensor& sinks, int64_t window) {
    DeviceTensor out(gpu, q.view().shape(), DType::bf16);
    const AttnMask m = AttnMask::over_cache(AttnMaskKind::causal, kv_len.view())
                           .with_window(window)
                           .with_sinks(sinks.view());
    gpu.attention_fwd(q, k, v, m, out, Tensor());
    HostTensor h(out.view().shape(), DType::bf16);
    gpu.download(h.view(), out);
    return h;
}

// Row invariance (Note in kernels/attention_tiles.h): a row decoded alone gives the bits it has in
// a 16-row verify block, with a window and sinks, though the block's first query reaches splits
// and tiles the later rows see nothing of. Capacity 4096 (splits of 64 keys) and 70000 (splits of
// 320 keys), window 128 and 3, Dh 64 (gpt-oss heads) and 128.
TEST(AttentionCuda, WindowedDecodedRowsWithSinksEqualVerifiedRowsBitForBit) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    Backend& gpu = *be.gpu;
    const int64_t sq = 16, h = 64, hkv = 8;
    for (int64_t d : {64, 128}) {
        for (int64_t cap : {4096, 70000}) {
            for (int64_t window : {128, 3}) {
                SCOPED_TRACE(fmt::format("Dh {} capacity {} window {}", d, cap, window));
                Rng rng(static_cast<uint64_t>(d * 7 + cap + window));
                const int64_t len = cap - 1000;  // cache rows after the verify block
                const DeviceTensor q =
                    upload(gpu, random_bf16_values({sq, h, d}, rng), DType::bf16);
                const DeviceTensor k =
                    upload(gpu, random_bf16_values({cap, hkv, d}, rng), DType::bf16);
                const DeviceTensor v =
                    upload(gpu, random_bf16_values({cap, hkv, d}, rng), DType::bf16);
                const DeviceTensor sinks = upload(gpu, sink_values(h, rng), DType::f32);
                const DeviceTensor block_len =
                    upload_i32(gpu, HostTensor::from_i32({1}, {static_cast<int32_t>(len)}));
                const HostTensor verify =
                    forward_over_cache(gpu, q, k, v, block_len, sinks, window);
                const int64_t row_bytes = h * d * 2;
                const DeviceTensor one(gpu, {1, h, d}, DType::bf16);
                for (int64_t i = 0; i < sq; ++i) {
                    gpu.copy(one, q.view().rows(i, i + 1));
                    const DeviceTensor one_len = upload_i32(
                        gpu, HostTensor::from_i32({1}, {static_cast<int32_t>(len - sq + i + 1)}));
                    const HostTensor alone =
                        forward_over_cache(gpu, one, k, v, one_len, sinks, window);
                    EXPECT_EQ(
                        std::memcmp(alone.view().data(),
                                    static_cast<const char*>(verify.view().data()) + i * row_bytes,
                                    row_bytes),
                        0)
                        << "row " << i;
                }
            }
        }
    }
}

// The decode step recorded once in a CUDA graph (kv_len read from device memory) and replayed at
// cache lengths around split and window boundaries gives the bits of the eager call.
TEST(AttentionCuda, GraphRecordedWindowedDecodeServesEveryCacheLength) {
    REQUIRE_CUDA_DEVICE();
    GraphOptions graphs;
    graphs.enabled = true;
    graphs.warmup_runs = 0;
    const auto gpu = make_backend(DeviceKind::cuda, 0, 1, graphs);
    const int64_t cap = 2048, h = 64, hkv = 8, d = 64, window = 128;
    Rng rng(99);
    const DeviceTensor q = upload(*gpu, random_bf16_values({1, h, d}, rng), DType::bf16);
    const DeviceTensor k = upload(*gpu, random_bf16_values({cap, hkv, d}, rng), DType::bf16);
    const DeviceTensor v = upload(*gpu, random_bf16_values({cap, hkv, d}, rng), DType::bf16);
    const DeviceTensor sinks = upload(*gpu, sink_values(h, rng), DType::f32);
    const DeviceTensor kv_len(*gpu, {1}, DType::i32);
    const DeviceTensor out(*gpu, {1, h, d}, DType::bf16);
    const AttnMask m = AttnMask::over_cache(AttnMaskKind::causal, kv_len.view())
                           .with_window(window)
                           .with_sinks(sinks.view());
    const StepOwner owner(*gpu);
    for (int32_t len : {1, 64, 65, 127, 128, 129, 200, 1000, 1025, 2048, 300, 2}) {
        const HostTensor len_host = HostTensor::from_i32({1}, {len});
        gpu->upload(kv_len, len_host.view());
        gpu->synchronize();  // the host source must outlive the copy
        gpu->run_step(StepKey{owner.id(), "windowed decode", {}},
                      [&] { gpu->attention_fwd(q, k, v, m, out, Tensor()); });
        HostTensor replayed({1, h, d}, DType::bf16), eager({1, h, d}, DType::bf16);
        gpu->download(replayed.view(), out);
        gpu->attention_fwd(q, k, v, m, out, Tensor());
        gpu->download(eager.view(), out);
        EXPECT_EQ(std::memcmp(replayed.view().data(), eager.view().data(), replayed.nbytes()), 0)
            << "kv_len " << len;
    }
    EXPECT_GE(gpu->graph_stats().captures, 1);
}

// Head dim 256 (the hybrid families' gated attention, Qwen3-Next and Qwen3.5, and the drafters
// that copy it): the tiled causal and full paths with their backward (two dK/dV launches there,
// split over key tiles too), the DFlash block mask of a drafter's training step, decode and
// verify over a cache with GQA 6 and 8, a prefill over a cache.
TEST(AttentionCuda, HeadDim256) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    const AttnMaskKind causal = AttnMaskKind::causal;
    check_case(be, make("causal 333 d256 g3", causal, 333, 333, 6, 2, 256, true));
    check_case(be, make("full 130x200 d256", AttnMaskKind::full, 130, 200, 4, 2, 256, true));
    check_case(be, dflash("dflash sorted 24x16 d256 g6", 24, 16, 333,
                          {0,   5,   17,  40,  64,  64,  90,  128, 129, 150, 190, 200,
                           210, 230, 250, 260, 270, 280, 290, 300, 310, 320, 330, 333},
                          24, 4, 256));
    std::vector<int32_t> many(128);
    for (size_t i = 0; i < many.size(); ++i) many[i] = static_cast<int32_t>(3 * i);
    check_case(be, dflash("dflash 128x16 split dK/dV d256", 128, 16, 500, many, 8, 2, 256));
    check_case(be, cache("decode sq1 d256 g6", causal, 1, 1000, 333, 24, 4, 256));
    check_case(be, cache("verify sq16 d256 g8", causal, 16, 1000, 777, 16, 2, 256));
    check_case(be, cache("prefill sq61 d256", causal, 61, 400, 200, 4, 2, 256));
}

TEST(AttentionCuda, RefusesUnsupportedHeadDim) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    DeviceTensor q(*be.gpu, {4, 2, 96}, DType::bf16), k(*be.gpu, {4, 2, 96}, DType::bf16);
    DeviceTensor out(*be.gpu, {4, 2, 96}, DType::bf16);
    const std::string msg =
        test::error_of([&] { be.gpu->attention_fwd(q, k, k, AttnMask::causal(), out, Tensor()); });
    EXPECT_TRUE(test::has(msg, "64") && test::has(msg, "128") && test::has(msg, "96")) << msg;
    DeviceTensor lse(*be.gpu, {2, 4}, DType::f32);
    const std::string bwd = test::error_of(
        [&] { be.gpu->attention_bwd(q, k, k, out, out, lse, AttnMask::causal(), q, k, k); });
    EXPECT_TRUE(test::has(bwd, "head dim 96 has no CUDA kernel")) << bwd;
}

}  // namespace
}  // namespace dflash

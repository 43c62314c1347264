// CUDA attention (backend/cuda/attention.cpp + kernels/attention_*.cu) against the CPU backend,
// which runs in f32 on the same bf16-rounded inputs. Every mask kind forward (and backward for
// causal, full and dflash_block) on awkward sizes: Sq/Sk not multiples of the 64-row tiles, head
// dims 64 and 128, GQA groups 1/2/4/8, causal with q_offset, dflash with padding blocks, anchor 0,
// duplicate anchors, ctx_len not a multiple of the tile and per-block context starts (packed
// documents), decoding over a KV cache with kv_len below the capacity (rows past kv_len hold NaN:
// they must never be read) for Sq = 1 and 16, and bitwise determinism of the backward (and
// forward) over two runs.
// Outputs are poisoned with NaN first, so unwritten elements fail.
// Tolerances: out (bf16) relative L2 error <= 1e-2 and every element within 3e-2 (1 + |ref|);
// lse (f32) within 2e-3, exactly -inf where a row sees nothing; dq/dk/dv (bf16, from bf16 P and
// dS on the tensor cores) relative L2 error <= 2e-2 and every element within 3e-2 (|ref| + rms).
// Skips visibly without a GPU. The kernels' logic is also checked on the CPU by
// tests/ops/attention_emu_test.cpp, the tile arithmetic by tests/ops/attention_tiles_test.cpp.
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
    bool bwd = false;

    std::string describe() const {
        std::ostringstream os;
        os << name << " [Sq=" << sq << " Sk=" << sk << " H=" << h << " Hkv=" << hkv << " Dh=" << d;
        if (kind == AttnMaskKind::causal) os << " causal q_offset=" << q_offset;
        if (kind == AttnMaskKind::full) os << " full";
        if (kind == AttnMaskKind::dflash_block) os << " dflash ctx=" << ctx << " B=" << block;
        if (!starts.empty()) os << " ctx_start";
        if (kv_len >= 0) os << " kv_len=" << kv_len;
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
    HostTensor q, k, v, dout, anchors, starts, kv_len;
    HostTensor k_gpu, v_gpu;  // K/V with NaN past kv_len
};

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
    return p;
}

AttnMask mask_of(const Case& c, const Tensor& anchors, const Tensor& kv_len,
                 const Tensor& starts = Tensor()) {
    switch (c.kind) {
        case AttnMaskKind::causal:
            return c.kv_len >= 0 ? AttnMask::over_cache(c.kind, kv_len)
                                 : AttnMask::causal(c.q_offset);
        case AttnMaskKind::full:
            return c.kv_len >= 0 ? AttnMask::over_cache(c.kind, kv_len) : AttnMask::full();
        case AttnMaskKind::dflash_block:
            break;
    }
    return AttnMask::dflash_block(c.ctx, c.block, anchors, starts);
}

struct GpuRun {
    DeviceTensor out, lse, dq, dk, dv;
};

struct GpuInputs {
    DeviceTensor q, k, v, dout, anchors, starts, kv_len;
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
    g.mask = mask_of(c, g.anchors.view(), g.kv_len.view(), g.starts.view());
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
    const AttnMask cmask = mask_of(c, p.anchors.view(), p.kv_len.view(), p.starts.view());
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

TEST(AttentionCuda, RefusesUnsupportedHeadDim) {
    REQUIRE_CUDA_DEVICE();
    Backends be;
    DeviceTensor q(*be.gpu, {4, 2, 96}, DType::bf16), k(*be.gpu, {4, 2, 96}, DType::bf16);
    DeviceTensor out(*be.gpu, {4, 2, 96}, DType::bf16);
    const std::string msg =
        test::error_of([&] { be.gpu->attention_fwd(q, k, k, AttnMask::causal(), out, Tensor()); });
    EXPECT_TRUE(test::has(msg, "64") && test::has(msg, "128") && test::has(msg, "96")) << msg;
}

}  // namespace
}  // namespace dflash

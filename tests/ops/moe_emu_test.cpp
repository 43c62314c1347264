// The grouping kernels of the CUDA mixture of experts (src/backend/cuda/kernels/moe_grouped.cu)
// on the CPU emulator of tests/ops/attention_emu.h (Note [Attention kernels on the CPU]): the
// counting sort against a plain stable grouping (bad ids included, one warp's segment and many);
// the sort and both grouped GEMMs of moe_experts, with the weighted gather done here, against
// cpu::moe_experts on the same bf16-rounded inputs; the tile arithmetic of kernels/moe.h
// exhaustively on small sizes; and row invariance (a token's outputs have the same bits alone and
// inside a block where its experts get other row counts). Checks the kernels' index arithmetic,
// fragment plumbing, edges and pipelining without a GPU (label cpu); tests/cuda/moe_cuda_test.cpp
// checks the real thing. Both cp.async modes run. MXFP4 weights (Note [moe MXFP4 tiles]): the
// bf16 decode of every (code, scale) against backend/mxfp4.h, and the GEMMs on blocks and scales
// give the bits of the GEMMs on the decoded bf16 weights, awkward sizes and row invariance
// included.
// Tolerance: the kernel rounds activations and expert outputs to bf16 (the op does too), so the
// result is within a few bf16 ulps: relative L2 error <= 1e-2, every element within 2e-2 |ref| +
// 1e-2 max |ref|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/mxfp4.h"
#include "core/rng.h"
#include "ops/attention_emu.h"
// The emulator must come first: it defines the CUDA spellings the kernels use.
#include "backend/cuda/kernels/moe_grouped.cu"

namespace dflash::cuda::moe {
namespace {

using attn_emu::CopyMode;
using attn_emu::Device;

float round_bf16(float x) {
    return bf16_to_f32(f32_to_bf16(x));
}

TEST(MoeTiles, ExpertOfTileAndBounds) {
    for (int experts = 1; experts <= 6; ++experts) {
        // Every split of up to 200 rows over the experts on a coarse grid of counts.
        std::vector<int> counts(static_cast<size_t>(experts), 0);
        for (int combo = 0; combo < 5 * 5 * 5 * 5 * 5 * 5; ++combo) {
            int c = combo, n = 0;
            bool skip = false;
            for (int e = 0; e < 6; ++e) {
                const int v = c % 5;
                c /= 5;
                if (e >= experts) {
                    skip = skip || v != 0;
                    continue;
                }
                counts[static_cast<size_t>(e)] = std::vector<int>{0, 1, 63, 64, 130}[v];
                n += counts[static_cast<size_t>(e)];
            }
            if (skip || n == 0) continue;
            std::vector<int32_t> tile_off(static_cast<size_t>(experts) + 1, 0);
            for (int e = 0; e < experts; ++e)
                tile_off[e + 1] = tile_off[e] + tiles_of(counts[static_cast<size_t>(e)]);
            ASSERT_LE(tile_off[experts], max_row_tiles(n, experts)) << "n " << n;
            for (int tm = 0; tm < tile_off[experts]; ++tm) {
                const int e = expert_of_tile(tile_off.data(), experts, tm);
                ASSERT_TRUE(tile_off[e] <= tm && tm < tile_off[e + 1])
                    << "tile " << tm << " -> expert " << e;
            }
        }
    }
    EXPECT_EQ(sort_warps(128, 3072 * 8), 32);
    EXPECT_EQ(sort_warps(128, 8), 1);
    EXPECT_EQ(sort_warps(2048, 1 << 20), 4);
    EXPECT_EQ(sort_warps(5, 200), 4);
    EXPECT_LE(sort_warps(kMaxExperts, 1 << 20) * kMaxExperts, 8192);
}

struct Case {
    int R, E, k, D, I;
};

// bf16 values as uint16 plus their f32 twins (what the CPU reference sees).
struct Mat {
    std::vector<uint16_t> bits;
    HostTensor f32;
    Mat(Shape shape, Rng& rng, float scale) : f32(shape) {
        bits.resize(static_cast<size_t>(f32.numel()));
        for (int64_t i = 0; i < f32.numel(); ++i) {
            const float v = round_bf16(scale * rng.normal());
            f32.f32()[i] = v;
            bits[static_cast<size_t>(i)] = f32_to_bf16(v);
        }
    }
};

struct Problem {
    Case c;
    Mat x, gate_up, gate_up_bias, down, down_bias;
    HostTensor ids, weights;
    int activation;
    Problem(const Case& cs, int act, Rng& rng)
        : c(cs),
          x({cs.R, cs.D}, rng, 1.0f),
          gate_up({cs.E, 2 * cs.I, cs.D}, rng, 4.0f / std::sqrt(float(cs.D))),
          gate_up_bias({cs.E, 2 * cs.I}, rng, 1.0f),
          down({cs.E, cs.D, cs.I}, rng, 1.0f / std::sqrt(float(cs.I))),
          down_bias({cs.E, cs.D}, rng, 0.5f),
          ids({cs.R, cs.k}, DType::i32),
          weights({cs.R, cs.k}),
          activation(act) {
        for (int64_t i = 0; i < ids.numel(); ++i)
            ids.i32()[i] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(cs.E)));
        for (int64_t i = 0; i < weights.numel(); ++i) weights.f32()[i] = rng.uniform();
    }
};

// The sort's layout, written here plainly: pairs grouped by expert, pair order within one; a pair
// with an id outside [0, experts) has no position (slot -1).
struct Layout {
    std::vector<int32_t> offsets, tile_offsets, sorted_pair, slot;
};
Layout sort_on_host(const std::vector<int32_t>& ids, int experts) {
    const int n = static_cast<int>(ids.size());
    Layout l;
    l.offsets.assign(static_cast<size_t>(experts) + 1, 0);
    l.tile_offsets.assign(static_cast<size_t>(experts) + 1, 0);
    l.slot.assign(static_cast<size_t>(n), -1);
    for (int e = 0; e < experts; ++e) {
        int count = 0;
        for (int p = 0; p < n; ++p) {
            if (ids[static_cast<size_t>(p)] != e) continue;
            l.slot[static_cast<size_t>(p)] = static_cast<int32_t>(l.sorted_pair.size());
            l.sorted_pair.push_back(p);
            ++count;
        }
        l.offsets[e + 1] = l.offsets[e] + count;
        l.tile_offsets[e + 1] = l.tile_offsets[e] + tiles_of(count);
    }
    return l;
}

// The sort kernel on the emulator; sorted_pair holds the positions it filled (offsets[E]).
Layout sort_emulated(const std::vector<int32_t>& ids, int experts) {
    const auto n = ids.size();
    Layout l;
    l.offsets.assign(static_cast<size_t>(experts) + 1, -7);
    l.tile_offsets.assign(static_cast<size_t>(experts) + 1, -7);
    l.sorted_pair.assign(n, -7);
    l.slot.assign(n, -7);
    ExpertsScratch s;
    s.offsets = l.offsets.data();
    s.tile_offsets = l.tile_offsets.data();
    s.sorted_pair = l.sorted_pair.data();
    s.slot = l.slot.data();
    Device dev;
    sort_pairs(ids.data(), static_cast<int>(n), experts, s, attn_emu::as_stream(dev));
    l.sorted_pair.resize(static_cast<size_t>(std::max(0, l.offsets[experts])));
    return l;
}

TEST(MoeSortEmu, MatchesStableGrouping) {
    Rng rng(3);
    // Pairs from one partial warp to several per warp of the block; experts 1 .. 300 (fewer warps
    // per block for more experts); ids outside [0, E) now and then.
    for (const int experts : {1, 3, 8, 128, 300}) {
        for (const int n : {1, 5, 31, 33, 100, 700, 2100}) {
            std::vector<int32_t> ids(static_cast<size_t>(n));
            for (auto& id : ids) {
                const double u = rng.uniform_f64();
                // Skewed: half the pairs on expert 0, so counts differ across experts.
                id = u < 0.03 ? (u < 0.015 ? -2 : experts)
                              : (u < 0.5 ? 0 : static_cast<int32_t>(rng.below(experts)));
            }
            const Layout want = sort_on_host(ids, experts), got = sort_emulated(ids, experts);
            const std::string what = "E " + std::to_string(experts) + " n " + std::to_string(n);
            EXPECT_EQ(got.offsets, want.offsets) << what;
            EXPECT_EQ(got.tile_offsets, want.tile_offsets) << what;
            EXPECT_EQ(got.sorted_pair, want.sorted_pair) << what;
            EXPECT_EQ(got.slot, want.slot) << what;
        }
    }
}

// MXFP4 experts (blocks and scales of both matrices), or none.
struct MxWeights {
    std::vector<uint8_t> gu_blocks, gu_scales, dn_blocks, dn_scales;
};

// moe_experts with the emulated sort and GEMMs; returns out [R, D] (bf16 values as f32). With mx
// the GEMMs read the MXFP4 weights instead of p's bf16 ones.
std::vector<float> run_emulated(const Problem& p, bool biases, CopyMode mode,
                                const MxWeights* mx = nullptr) {
    const Case& c = p.c;
    const std::vector<int32_t> ids(p.ids.i32(), p.ids.i32() + p.ids.numel());
    Layout l = sort_emulated(ids, c.E);
    l.sorted_pair.resize(static_cast<size_t>(c.R) * c.k);  // the GEMMs' view of the scratch
    const int n = c.R * c.k;
    const uint16_t kNan = 0x7fc0;
    std::vector<uint16_t> act(static_cast<size_t>(n) * c.I, kNan),
        y(static_cast<size_t>(n) * c.D, kNan);
    Device dev;
    dev.mode = mode;
    const auto expose = [&](const void* q, size_t bytes) {
        const auto* b = static_cast<const unsigned char*>(q);
        dev.buffers.push_back({b, b + bytes});
    };
    expose(p.x.bits.data(), p.x.bits.size() * 2);
    expose(p.gate_up.bits.data(), p.gate_up.bits.size() * 2);
    expose(p.down.bits.data(), p.down.bits.size() * 2);
    expose(act.data(), act.size() * 2);

    GroupedGemmArgs g;
    g.offsets = l.offsets.data();
    g.tile_offsets = l.tile_offsets.data();
    g.experts = c.E;
    g.pairs = n;
    g.a = p.x.bits.data();
    g.sorted_pair = l.sorted_pair.data();
    g.k_per_row = c.k;
    g.w = mx != nullptr ? nullptr : p.gate_up.bits.data();
    g.w_blocks = mx != nullptr ? mx->gu_blocks.data() : nullptr;
    g.w_scales = mx != nullptr ? mx->gu_scales.data() : nullptr;
    g.bias = biases ? p.gate_up_bias.bits.data() : nullptr;
    g.kdim = c.D;
    g.n = c.I;
    g.out = act.data();
    g.activation = p.activation;
    grouped_gemm(g, attn_emu::as_stream(dev));

    g.a = act.data();
    g.sorted_pair = nullptr;
    g.k_per_row = 1;
    g.w = mx != nullptr ? nullptr : p.down.bits.data();
    g.w_blocks = mx != nullptr ? mx->dn_blocks.data() : nullptr;
    g.w_scales = mx != nullptr ? mx->dn_scales.data() : nullptr;
    g.bias = biases ? p.down_bias.bits.data() : nullptr;
    g.kdim = c.I;
    g.n = c.D;
    g.out = y.data();
    g.activation = kNone;
    grouped_gemm(g, attn_emu::as_stream(dev));

    // The gather kernel's sum, in pick order, fp32, then bf16.
    std::vector<float> out(static_cast<size_t>(c.R) * c.D);
    for (int r = 0; r < c.R; ++r) {
        for (int d = 0; d < c.D; ++d) {
            float acc = 0.0f;
            for (int j = 0; j < c.k; ++j) {
                const int32_t s = l.slot[static_cast<size_t>(r * c.k + j)];
                acc +=
                    p.weights.f32()[r * c.k + j] * bf16_to_f32(y[static_cast<size_t>(s) * c.D + d]);
            }
            out[static_cast<size_t>(r) * c.D + d] = round_bf16(acc);
        }
    }
    return out;
}

HostTensor run_cpu(const Problem& p, bool biases) {
    MoeExperts w;
    w.gate_up = p.gate_up.f32;
    w.down = p.down.f32;
    if (biases) {
        w.gate_up_bias = p.gate_up_bias.f32;
        w.down_bias = p.down_bias.f32;
    }
    w.activation = p.activation == kSwiglu ? MoeActivation::swiglu : MoeActivation::clamped_swiglu;
    HostTensor out({p.c.R, p.c.D});
    cpu::moe_experts(cpu::PooledExec{1}, p.x.f32, p.ids, p.weights, w, out);
    return out;
}

// Empty when got matches ref within the tolerance above, else where it does not.
std::string compare(const std::vector<float>& got, const HostTensor& ref) {
    double num = 0, den = 0, mx = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) mx = std::max(mx, std::fabs(double{ref.f32()[i]}));
    for (int64_t i = 0; i < ref.numel(); ++i) {
        const double g = got[static_cast<size_t>(i)], r = ref.f32()[i];
        if (!(std::fabs(g - r) <= 2e-2 * std::fabs(r) + 1e-2 * mx))
            return "element " + std::to_string(i) + ": got " + std::to_string(g) + " ref " +
                   std::to_string(r);
        num += (g - r) * (g - r);
        den += r * r;
    }
    const double rel = std::sqrt(num / std::max(den, 1e-30));
    return rel <= 1e-2 ? "" : "relative L2 error " + std::to_string(rel);
}

TEST(MoeGemmEmu, MatchesCpuReference) {
    Rng rng(7);
    // D = 13 / I = 7: element loads; D = 72 / I = 40: cp.async with a partial last slice and
    // partial column tiles; 70 rows on one expert: two row tiles; I = 72 > 64 units: two gated
    // column tiles; D = 136 > 128: two output column tiles; D = 328 and 301: more slices than
    // the ring has stages (cp.async and element loads).
    for (const Case& c : {Case{3, 2, 1, 13, 7}, Case{9, 3, 2, 72, 40}, Case{70, 1, 1, 16, 8},
                          Case{5, 4, 3, 136, 72}, Case{3, 2, 2, 328, 24}, Case{2, 2, 1, 301, 9}}) {
        for (const int act : {int{kSwiglu}, int{kClampedSwiglu}}) {
            for (const bool biases : {false, true}) {
                for (const CopyMode mode : {CopyMode::at_wait, CopyMode::at_issue}) {
                    const Problem p(c, act, rng);
                    const std::vector<float> got = run_emulated(p, biases, mode);
                    EXPECT_EQ(compare(got, run_cpu(p, biases)), "")
                        << "R " << c.R << " E " << c.E << " k " << c.k << " D " << c.D << " I "
                        << c.I << " act " << act << (biases ? " biases" : "");
                }
            }
        }
    }
}

TEST(MoeGemmEmu, RowInvariant) {
    Rng rng(9);
    for (const Case& shape : {Case{1, 3, 2, 72, 40}, Case{1, 3, 2, 13, 7}}) {
        Problem block({70, shape.E, shape.k, shape.D, shape.I}, kClampedSwiglu, rng);
        // Every other pair on expert 0, so the token at row 40 sits in the second row tile of
        // expert 0 and at row 0 of expert 2's only tile.
        std::fill_n(block.ids.i32(), block.ids.numel(), 0);
        block.ids.i32()[40 * 2] = 0;
        block.ids.i32()[40 * 2 + 1] = 2;
        Problem solo({1, shape.E, shape.k, shape.D, shape.I}, kClampedSwiglu, rng);
        solo.gate_up = std::move(block.gate_up);
        solo.down = std::move(block.down);
        solo.gate_up_bias = std::move(block.gate_up_bias);
        solo.down_bias = std::move(block.down_bias);
        std::copy_n(block.x.bits.data() + 40 * shape.D, shape.D, solo.x.bits.data());
        std::copy_n(block.ids.i32() + 40 * 2, 2, solo.ids.i32());
        std::copy_n(block.weights.f32() + 40 * 2, 2, solo.weights.f32());
        const std::vector<float> alone = run_emulated(solo, true, CopyMode::at_wait);
        block.gate_up = std::move(solo.gate_up);
        block.down = std::move(solo.down);
        block.gate_up_bias = std::move(solo.gate_up_bias);
        block.down_bias = std::move(solo.down_bias);
        const std::vector<float> all = run_emulated(block, true, CopyMode::at_wait);
        EXPECT_EQ(std::memcmp(alone.data(), all.data() + 40 * shape.D, alone.size() * 4), 0)
            << "D " << shape.D;
    }
}

// ---- MXFP4 weights --------------------------------------------------------------------------

TEST(MoeMxfp4Emu, DecodeMatchesHostDecoderForEveryCodeAndScale) {
    for (uint32_t scale = 0; scale < 256; ++scale) {
        for (uint32_t code = 0; code < 16; ++code) {
            // One group whose first value is the code (the byte's low nibble), the rest zeros.
            std::vector<uint8_t> blocks(16, 0), scales(1, static_cast<uint8_t>(scale));
            blocks[0] = static_cast<uint8_t>(code);
            std::vector<float> out(32);
            decode_mxfp4(blocks, scales, 1, 1, out.data());
            ASSERT_EQ(mxfp4_bf16(code, scale), uint32_t{f32_to_bf16(out[0])})
                << "code " << code << " scale " << scale << " value " << out[0];
        }
    }
}

// The 8-value decode the tile loads use (byte-permute tables where the scale keeps the values
// normal) against mxfp4_bf16 value by value: every code at every place of the word, every scale,
// other places random.
TEST(MoeMxfp4Emu, EightValueDecodeMatchesValueByValue) {
    Rng rng(19);
    for (uint32_t scale = 0; scale < 256; ++scale) {
        for (uint32_t code = 0; code < 16; ++code) {
            for (int j = 0; j < 8; ++j) {
                const uint32_t others = static_cast<uint32_t>(rng.next_u64());
                const uint32_t codes = (others & ~(uint32_t{15} << (4 * j))) | (code << (4 * j));
                uint32_t out[4];
                mxfp4_bf16x8(codes, scale, out);
                for (int v = 0; v < 8; ++v) {
                    const uint32_t want = mxfp4_bf16((codes >> (4 * v)) & 15u, scale);
                    const uint32_t got = (out[v / 2] >> (16 * (v % 2))) & 0xffffu;
                    ASSERT_EQ(got, want)
                        << "scale " << scale << " codes " << codes << " value " << v;
                }
            }
        }
    }
}

// Random MXFP4 experts for p's shapes; p's bf16 weights become their decoded values.
MxWeights make_mx(Problem& p, Rng& rng) {
    const Case& c = p.c;
    MxWeights m;
    const auto bytes = [&](std::vector<uint8_t>& v, size_t n, int lo, int hi) {
        v.resize(n);
        for (auto& b : v) b = static_cast<uint8_t>(lo + static_cast<int>(rng.below(hi - lo + 1)));
    };
    const auto set = [&](Mat& w, const std::vector<uint8_t>& blocks,
                         const std::vector<uint8_t>& scales, int64_t cols) {
        const int64_t groups = cols / 32, rows = w.f32.numel() / cols;
        decode_mxfp4(blocks, scales, rows, groups, w.f32.f32());
        for (int64_t i = 0; i < w.f32.numel(); ++i)
            w.bits[static_cast<size_t>(i)] = f32_to_bf16(w.f32.f32()[i]);
    };
    const auto gu_groups = static_cast<size_t>(c.E) * 2 * c.I * (c.D / 32);
    const auto dn_groups = static_cast<size_t>(c.E) * c.D * (c.I / 32);
    bytes(m.gu_blocks, gu_groups * 16, 0, 255);
    bytes(m.gu_scales, gu_groups, 121, 125);
    bytes(m.dn_blocks, dn_groups * 16, 0, 255);
    bytes(m.dn_scales, dn_groups, 120, 123);
    set(p.gate_up, m.gu_blocks, m.gu_scales, c.D);
    set(p.down, m.dn_blocks, m.dn_scales, c.I);
    return m;
}

TEST(MoeMxfp4Emu, SameBitsAsDecodedBf16Weights) {
    Rng rng(21);
    // D, I multiples of 32 but not of the 64-wide slice (96, 160, 352: partial last slices; 352:
    // more slices than stages), I = 96 > 64 units (two gated column tiles, the second partial),
    // D = 160 > 128 outputs (two column tiles); experts with no rows (E = 6, R * k = 4), one
    // expert with 70 rows (two row tiles).
    for (const Case& c : {Case{1, 3, 1, 32, 32}, Case{2, 6, 2, 96, 160}, Case{9, 3, 2, 160, 96},
                          Case{70, 1, 1, 64, 32}, Case{5, 4, 3, 352, 64}}) {
        for (const int act : {int{kSwiglu}, int{kClampedSwiglu}}) {
            for (const CopyMode mode : {CopyMode::at_wait, CopyMode::at_issue}) {
                Problem p(c, act, rng);
                const MxWeights mx = make_mx(p, rng);
                const std::vector<float> want = run_emulated(p, true, mode);
                const std::vector<float> got = run_emulated(p, true, mode, &mx);
                EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0)
                    << "R " << c.R << " E " << c.E << " k " << c.k << " D " << c.D << " I " << c.I
                    << " act " << act;
                // And the decoded weights give the reference's numbers.
                EXPECT_EQ(compare(got, run_cpu(p, true)), "") << "R " << c.R << " D " << c.D;
            }
        }
    }
}

TEST(MoeMxfp4Emu, RowInvariant) {
    Rng rng(23);
    const Case shape{1, 3, 2, 96, 64};
    Problem block({70, shape.E, shape.k, shape.D, shape.I}, kClampedSwiglu, rng);
    const MxWeights mx = make_mx(block, rng);
    std::fill_n(block.ids.i32(), block.ids.numel(), 0);
    block.ids.i32()[40 * 2 + 1] = 2;
    Problem solo({1, shape.E, shape.k, shape.D, shape.I}, kClampedSwiglu, rng);
    solo.gate_up_bias = std::move(block.gate_up_bias);
    solo.down_bias = std::move(block.down_bias);
    std::copy_n(block.x.bits.data() + 40 * shape.D, shape.D, solo.x.bits.data());
    std::copy_n(block.ids.i32() + 40 * 2, 2, solo.ids.i32());
    std::copy_n(block.weights.f32() + 40 * 2, 2, solo.weights.f32());
    const std::vector<float> alone = run_emulated(solo, true, CopyMode::at_wait, &mx);
    block.gate_up_bias = std::move(solo.gate_up_bias);
    block.down_bias = std::move(solo.down_bias);
    const std::vector<float> all = run_emulated(block, true, CopyMode::at_wait, &mx);
    EXPECT_EQ(std::memcmp(alone.data(), all.data() + 40 * shape.D, alone.size() * 4), 0);
}

}  // namespace
}  // namespace dflash::cuda::moe

// The grouped expert GEMMs of the CUDA mixture of experts (src/backend/cuda/kernels/moe_gemm.cu)
// on the CPU emulator of tests/ops/attention_emu.h (Note [Attention kernels on the CPU]): both
// GEMMs of moe_experts, with the sort's layout built here on the host and the weighted gather
// done here too, against cpu::moe_experts on the same bf16-rounded inputs; the tile arithmetic of
// kernels/moe.h exhaustively on small sizes; and row invariance (a token's outputs have the same
// bits alone and inside a block where its experts get other row counts). Checks the kernel's
// index arithmetic, fragment plumbing, edges and pipelining without a GPU (label cpu);
// tests/cuda/moe_cuda_test.cpp checks the real thing. Both cp.async modes run.
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
#include "core/rng.h"
#include "ops/attention_emu.h"
// The emulator must come first: it defines the CUDA spellings the kernels use.
#include "backend/cuda/kernels/moe_gemm.cu"

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
    EXPECT_EQ(sort_warps(128), 32);
    EXPECT_EQ(sort_warps(2048), 4);
    EXPECT_GE(sort_warps(kMaxExperts) * kMaxExperts, kMaxExperts);
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

// The sort kernel's layout, written here plainly: pairs grouped by expert, pair order within one.
struct Layout {
    std::vector<int32_t> offsets, tile_offsets, sorted_pair, slot;
};
Layout sort_pairs(const HostTensor& ids, int experts) {
    const int n = static_cast<int>(ids.numel());
    Layout l;
    l.offsets.assign(static_cast<size_t>(experts) + 1, 0);
    l.tile_offsets.assign(static_cast<size_t>(experts) + 1, 0);
    l.slot.assign(static_cast<size_t>(n), -1);
    for (int e = 0; e < experts; ++e) {
        int count = 0;
        for (int p = 0; p < n; ++p) {
            if (ids.i32()[p] != e) continue;
            l.slot[static_cast<size_t>(p)] = static_cast<int32_t>(l.sorted_pair.size());
            l.sorted_pair.push_back(p);
            ++count;
        }
        l.offsets[e + 1] = l.offsets[e] + count;
        l.tile_offsets[e + 1] = l.tile_offsets[e] + tiles_of(count);
    }
    return l;
}

// moe_experts with the emulated GEMMs; returns out [R, D] (bf16 values as f32).
std::vector<float> run_emulated(const Problem& p, bool biases, CopyMode mode) {
    const Case& c = p.c;
    const Layout l = sort_pairs(p.ids, c.E);
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
    g.w = p.gate_up.bits.data();
    g.bias = biases ? p.gate_up_bias.bits.data() : nullptr;
    g.kdim = c.D;
    g.n = c.I;
    g.out = act.data();
    g.activation = p.activation;
    grouped_gemm(g, attn_emu::as_stream(dev));

    g.a = act.data();
    g.sorted_pair = nullptr;
    g.k_per_row = 1;
    g.w = p.down.bits.data();
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
    // column tiles; D = 136 > 128: two output column tiles.
    for (const Case& c : {Case{3, 2, 1, 13, 7}, Case{9, 3, 2, 72, 40}, Case{70, 1, 1, 16, 8},
                          Case{5, 4, 3, 136, 72}}) {
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

}  // namespace
}  // namespace dflash::cuda::moe

// rows_linear's kernel (src/backend/cuda/kernels/rows_linear.cu) on the CPU emulator of
// tests/ops/attention_emu.h (Note [Attention kernels on the CPU]): every epilogue and tile width
// against cpu::rows_linear on the same bf16 values, k with a partial last chunk and columns past a
// tile's end, and row invariance (Note [rows_linear row invariance]: each row of a 16-row call
// has the bits of that row alone). Checks the fragment plumbing and the warps' reduction without a
// GPU (label cpu), in both of the emulator's cp.async modes; tests/cuda/rows_linear_cuda_test.cpp
// checks the real thing.
// Tolerance: fp32 sums in another order, then one bf16 rounding: every element within
// 1/128 |ref| + 1e-3 max |ref|.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cpu/cpu_ops.h"
#include "core/rng.h"
#include "ops/attention_emu.h"
// The emulator must come first: it defines the CUDA spellings the kernels use.
#include "backend/cuda/kernels/rows_linear.cu"

namespace dflash::cuda::rows {
namespace {

using attn_emu::Device;

std::vector<uint16_t> bf16_random(int64_t n, Rng& rng) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = f32_to_bf16(rng.normal());
    return v;
}

HostTensor as_f32(const std::vector<uint16_t>& v, Shape s) {
    HostTensor t(s, DType::f32);
    for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = bf16_to_f32(v[static_cast<size_t>(i)]);
    return t;
}

struct Case {
    int rows, k;
    std::vector<int> n;  // segment rows (store) or the one weight's rows
    int epilogue;
    bool f32_out = false;
};

// Runs the kernel on the emulator; returns y as floats.
std::vector<float> run(const Case& c, const std::vector<uint16_t>& x,
                       const std::vector<std::vector<uint16_t>>& w,
                       const std::vector<uint16_t>& residual,
                       attn_emu::CopyMode mode = attn_emu::CopyMode::at_wait) {
    RowsArgs a;
    a.x = x.data();
    a.rows = c.rows;
    a.k = c.k;
    a.nseg = static_cast<int>(c.n.size());
    for (size_t i = 0; i < c.n.size(); ++i) {
        a.w[i] = w[i].data();
        a.n[i] = c.n[i];
    }
    a.epilogue = c.epilogue;
    int cols = c.n[0];
    if (c.epilogue == kStore) {
        cols = 0;
        for (int n : c.n) cols += n;
    } else {
        a.nseg = 1;
        a.n[1] = 0;
    }
    a.residual = residual.empty() ? nullptr : residual.data();
    std::vector<uint16_t> y16(static_cast<size_t>(c.rows) * cols, 0xffffu);
    std::vector<float> y32(static_cast<size_t>(c.rows) * cols, std::nanf(""));
    a.y_f32 = c.f32_out;
    a.y = c.f32_out ? static_cast<void*>(y32.data()) : static_cast<void*>(y16.data());
    a.sm_count = 1;  // a few blocks, each looping over several column tiles
    Device dev;
    dev.mode = mode;
    auto add = [&](const std::vector<uint16_t>& v) {
        const auto* b = reinterpret_cast<const unsigned char*>(v.data());
        dev.buffers.push_back({b, b + v.size() * sizeof(uint16_t)});
    };
    add(x);
    for (const auto& wi : w) add(wi);
    rows_linear(a, attn_emu::as_stream(dev));
    if (!c.f32_out)
        for (size_t i = 0; i < y16.size(); ++i) y32[i] = bf16_to_f32(y16[i]);
    return y32;
}

std::string check(const Case& c, uint64_t seed) {
    Rng rng(seed);
    const std::vector<uint16_t> x = bf16_random(static_cast<int64_t>(c.rows) * c.k, rng);
    std::vector<std::vector<uint16_t>> w;
    for (int n : c.n) w.push_back(bf16_random(static_cast<int64_t>(n) * c.k, rng));
    int cols = c.epilogue == kStore ? 0 : c.n[0];
    if (c.epilogue == kStore)
        for (int n : c.n) cols += n;
    const std::vector<uint16_t> residual =
        c.epilogue == kAdd ? bf16_random(static_cast<int64_t>(c.rows) * cols, rng)
                           : std::vector<uint16_t>();
    const std::vector<float> got = run(c, x, w, residual);
    // The copies performed when issued instead of when waited for: the same bits (a kernel that
    // read a slot before waiting for it would see stale bytes in one of the modes).
    if (run(c, x, w, residual, attn_emu::CopyMode::at_issue) != got) return "copy modes differ";

    auto cpu = make_cpu_backend(1);
    RowsLinear rl;
    std::vector<HostTensor> wt;
    for (size_t i = 0; i < c.n.size(); ++i) wt.push_back(as_f32(w[i], {c.n[i], c.k}));
    for (size_t i = 0; i < wt.size(); ++i) rl.w[i] = wt[i];
    rl.epilogue = c.epilogue == kStore ? RowsEpilogue::store
                  : c.epilogue == kAdd ? RowsEpilogue::add
                                       : RowsEpilogue::swiglu;
    HostTensor xr = as_f32(x, {c.rows, c.k}), ref({c.rows, cols});
    HostTensor res = residual.empty() ? HostTensor() : as_f32(residual, {c.rows, cols});
    cpu->rows_linear(xr, rl, res, ref);
    double mx = 0;
    for (int64_t i = 0; i < ref.numel(); ++i) mx = std::max(mx, std::fabs(double(ref.f32()[i])));
    for (int64_t i = 0; i < ref.numel(); ++i) {
        const double r = ref.f32()[i], g = got[static_cast<size_t>(i)];
        if (!(std::fabs(g - r) <= std::fabs(r) / 128 + 1e-3 * mx)) {
            return "element " + std::to_string(i) + ": got " + std::to_string(g) + ", want " +
                   std::to_string(r);
        }
    }
    // Row invariance: each row alone gives the same bits.
    for (int r = 0; r < c.rows; r += std::max(1, c.rows - 1)) {
        Case one = c;
        one.rows = 1;
        const std::vector<uint16_t> x1(x.begin() + static_cast<int64_t>(r) * c.k,
                                       x.begin() + static_cast<int64_t>(r + 1) * c.k);
        const std::vector<uint16_t> res1 =
            residual.empty()
                ? residual
                : std::vector<uint16_t>(residual.begin() + static_cast<int64_t>(r) * cols,
                                        residual.begin() + static_cast<int64_t>(r + 1) * cols);
        const std::vector<float> alone = run(one, x1, w, res1);
        if (std::memcmp(alone.data(), got.data() + static_cast<size_t>(r) * cols,
                        static_cast<size_t>(cols) * sizeof(float)) != 0) {
            return "row " + std::to_string(r) + " alone differs from the row in a block";
        }
    }
    return "";
}

TEST(RowsLinearEmu, EveryEpilogueAndTileAgainstTheCpu) {
    const std::vector<Case> cases = {
        {1, 64, {16}, kStore},
        {16, 72, {8, 16, 8}, kStore},   // three segments, k with a partial chunk
        {3, 64, {40, 24, 64}, kStore},  // more tiles than blocks: tiles loop, rings run on
        {5, 264, {13}, kStore, true},   // f32 out, columns past the last tile
        {3, 128, {24}, kAdd},
        {16, 40, {16, 16}, kSwiglu},
        {2, 520, {8}, kAdd},           // a partial last chunk of 64
        {9, 4104, {8}, kAdd},          // more chunks a warp than ring stages; rows 8-15 copied
        {1, 2056, {16, 16}, kSwiglu},  // a warp with a chunk fewer than the others
        {4, 4104, {24}, kStore},       // rows 8-15 absent, more chunks a warp than ring stages
        {12, 2056, {8, 8}, kSwiglu},   // the pair with rows 8-15, more chunks than stages
    };
    uint64_t seed = 10;
    for (const Case& c : cases) {
        EXPECT_EQ(check(c, seed++), "")
            << "rows " << c.rows << " k " << c.k << " epilogue " << c.epilogue;
    }
}

TEST(RowsLinearEmu, TileWidthDependsOnShapesAlone) {
    RowsArgs a;
    a.rows = 1;
    a.n[0] = 4096;
    a.n[1] = 1024;
    a.n[2] = 1024;
    a.nseg = 3;
    const int one = rows_tile_cols(a);
    a.rows = 16;
    EXPECT_EQ(rows_tile_cols(a), one);
    EXPECT_EQ(one, 8);  // 6144 columns: 384 tiles of 16, below two a block
    a.n[0] = 151936;
    a.nseg = 1;
    EXPECT_EQ(rows_tile_cols(a), 16);
    a.epilogue = kSwiglu;
    EXPECT_EQ(rows_tile_cols(a), 8);  // the pair moves as much a stage at 8 columns
    a.epilogue = kStore;
    a.n[0] = 16 * 1024;
    a.n[1] = 1000;  // a segment that is not a multiple of 16 before the last
    a.nseg = 3;
    EXPECT_EQ(rows_tile_cols(a), 8);
}

}  // namespace
}  // namespace dflash::cuda::rows

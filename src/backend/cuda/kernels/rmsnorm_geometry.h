// How the RMSNorm kernels (rmsnorm.cu) lay rows over threads, as plain host arithmetic so it is
// tested exhaustively on the CPU (tests/ops/rmsnorm_geometry_test.cpp, label cpu). A row of C
// values is split into C / vec vectors; a group of `tpr` threads (a power of two) owns a row and
// each thread up to `maxv` of its vectors (lane, lane + tpr, ...), held in registers. Short rows
// share a 256-thread block (rpb groups; their sums are warp shuffles), a row of more than 32
// threads fills its own block (a block reduction). The backward gives block b the rows
// [b * rows_per_block, ...) and writes one dw partial row per block. No CUDA or fmt here.
#pragma once

#include <algorithm>
#include <cstdint>

namespace dflash::cuda::kernels {

constexpr int kRmsNormBlock = 256;              // threads of a block that groups share
constexpr int64_t kRmsNormMaxCols = 8192;       // the longest row (hidden sizes up to 8192)
constexpr int64_t kRmsNormMaxBwdBlocks = 1024;  // dw partial rows (fixed: same on every GPU)

struct RmsNormGeometry {
    int vec = 1;      // values per vector: 8 (16-byte accesses) or 1
    int maxv = 1;     // vectors per thread (template parameter): 1 or 4 (vec 8), 32 (vec 1)
    int tpr = 1;      // threads per row, a power of two <= 256
    int threads = 0;  // block size
    int rpb = 1;      // rows per block in flight
};

constexpr int rmsnorm_pow2_at_least(int64_t x) {
    int p = 1;
    while (p < x) p *= 2;
    return p;
}

// cols in [1, kRmsNormMaxCols]; vec8: cols % 8 == 0 and every pointer 16-byte aligned.
constexpr RmsNormGeometry rmsnorm_geometry(int64_t cols, bool vec8) {
    RmsNormGeometry g;
    g.vec = vec8 ? 8 : 1;
    const int64_t nvec = cols / g.vec;
    if (g.vec == 8 && nvec <= 32) {
        g.maxv = 1;
        g.tpr = rmsnorm_pow2_at_least(nvec);
    } else {
        g.maxv = 32 / g.vec;
        const int64_t per = (nvec + g.maxv - 1) / g.maxv;
        g.tpr = std::min(rmsnorm_pow2_at_least(nvec), std::max(32, rmsnorm_pow2_at_least(per)));
    }
    g.threads = g.tpr > 32 ? g.tpr : kRmsNormBlock;
    g.rpb = g.threads / g.tpr;
    return g;
}

// Shared memory of the backward block: rpb partial dw rows when groups share the block.
constexpr int64_t rmsnorm_bwd_smem_bytes(const RmsNormGeometry& g, int64_t cols) {
    return g.rpb > 1 ? int64_t{4} * g.rpb * cols : 0;
}

struct RmsNormBwdSplit {
    int64_t rows_per_block = 0;
    int64_t blocks = 0;
};

// rows >= 1: at most kRmsNormMaxBwdBlocks blocks, none empty.
constexpr RmsNormBwdSplit rmsnorm_bwd_split(int64_t rows, const RmsNormGeometry& g) {
    const int64_t groups = (rows + g.rpb - 1) / g.rpb;
    const int64_t target = std::min(groups, kRmsNormMaxBwdBlocks);
    RmsNormBwdSplit s;
    s.rows_per_block = (rows + target - 1) / target;
    s.blocks = (rows + s.rows_per_block - 1) / s.rows_per_block;
    return s;
}

// f32 elements of the backward's partials for either path (alignment picks the path at launch).
constexpr int64_t rmsnorm_bwd_partial_floats(int64_t rows, int64_t cols) {
    if (rows <= 0) return 0;
    const int64_t a = rmsnorm_bwd_split(rows, rmsnorm_geometry(cols, cols % 8 == 0)).blocks;
    const int64_t b = rmsnorm_bwd_split(rows, rmsnorm_geometry(cols, false)).blocks;
    return std::max(a, b) * cols;
}

}  // namespace dflash::cuda::kernels

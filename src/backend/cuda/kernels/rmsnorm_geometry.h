// How the RMSNorm kernels (rmsnorm.cu) lay rows over threads, as plain host arithmetic so it is
// tested exhaustively on the CPU (tests/ops/rmsnorm_geometry_test.cpp, label cpu). A row of C
// values is split into C / vec vectors; a group of `tpr` threads (a power of two) owns a row and
// each thread up to `maxv` of its vectors (lane, lane + tpr, ...), held in registers. Short rows
// share a 256-thread block (rpb groups; their sums are warp shuffles), a row of more than 32
// threads fills its own block (a block reduction). The backward gives block b the rows
// rmsnorm_bwd_first_row(b) .. (b + 1) and writes one dw partial row per block; two fixed-order
// passes add the partials into dw. No CUDA or fmt here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

// The row split is also computed inside the kernel.
#if defined(__CUDACC__)
#define DF_HOST_DEVICE __host__ __device__
#else
#define DF_HOST_DEVICE
#endif

namespace dflash::cuda::kernels {

constexpr int kRmsNormBlock = 256;         // threads of a block that groups share
constexpr int64_t kRmsNormMaxCols = 8192;  // the longest row (hidden sizes up to 8192)

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
    int64_t blocks = 0;         // = dw partial rows
    int64_t reduce_groups = 0;  // partial rows after the first reduction pass (1: one pass)
};

// Partial rows the first reduction pass adds per output row (its blocks sum 256 rows each).
constexpr int64_t kRmsNormReduceChunk = 256;

// rows >= 1. About 32 rows per block (the partial row a block writes and the reduction reads
// back cost 8 bytes per column, against 6 per column per row of dy, x and dx), but at least 264
// blocks (2 per SM) while there are row groups for them and at most 8192 (so the reduction stays
// small). A function of rows and the geometry only: the same split, hence the same dw bits, on
// every GPU.
constexpr RmsNormBwdSplit rmsnorm_bwd_split(int64_t rows, const RmsNormGeometry& g) {
    const int64_t groups = (rows + g.rpb - 1) / g.rpb;
    RmsNormBwdSplit s;
    s.blocks = std::min(groups, std::clamp<int64_t>(rows / 32, 264, 8192));
    s.reduce_groups = (s.blocks + kRmsNormReduceChunk - 1) / kRmsNormReduceChunk;
    return s;
}

// Block b of `blocks` (<= rows) owns rows [first(b), first(b + 1)): balanced, none empty.
DF_HOST_DEVICE constexpr int64_t rmsnorm_bwd_first_row(int64_t b, int64_t rows, int64_t blocks) {
    return b * rows / blocks;
}

// f32 elements of the backward's workspace (the partials and the first pass's sums) for either
// path (alignment picks the path at launch).
constexpr int64_t rmsnorm_bwd_workspace_floats(int64_t rows, int64_t cols) {
    if (rows <= 0) return 0;
    int64_t most = 0;
    for (bool vec8 : {false, cols % 8 == 0}) {
        const RmsNormBwdSplit s = rmsnorm_bwd_split(rows, rmsnorm_geometry(cols, vec8));
        most = std::max(most, (s.blocks + s.reduce_groups) * cols);
    }
    return most;
}

}  // namespace dflash::cuda::kernels

// The CUDA RMSNorm kernels' row layout (backend/cuda/kernels/rmsnorm_geometry.h), checked on the
// CPU for every row length 1..8192 on both paths: the thread groups cover every vector of a row
// exactly once with at most maxv vectors per thread, blocks are whole warps of at most 256
// threads, the backward's shared memory fits, and the backward's row split covers every row once
// with at most 8192 blocks (so at most two reduction passes), within the workspace the op takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/kernels/rmsnorm_geometry.h"

namespace dflash::cuda::kernels {
namespace {

bool is_pow2(int x) {
    return x > 0 && (x & (x - 1)) == 0;
}

TEST(RmsNormGeometry, EveryRowLengthIsCoveredOnBothPaths) {
    for (int64_t cols = 1; cols <= kRmsNormMaxCols; ++cols) {
        for (bool vec8 : {false, true}) {
            if (vec8 && cols % 8 != 0) continue;
            const RmsNormGeometry g = rmsnorm_geometry(cols, vec8);
            const int64_t nvec = cols / g.vec;
            SCOPED_TRACE(::testing::Message() << "cols " << cols << " vec " << g.vec);
            ASSERT_EQ(g.vec, vec8 ? 8 : 1);
            // Only the instantiated kernels: <8, 1>, <8, 4>, <1, 32>.
            ASSERT_TRUE((g.vec == 8 && (g.maxv == 1 || g.maxv == 4)) ||
                        (g.vec == 1 && g.maxv == 32));
            ASSERT_TRUE(is_pow2(g.tpr));
            ASSERT_LE(g.tpr, 256);
            ASSERT_GE(int64_t{g.tpr} * g.maxv, nvec) << "a thread would need more registers";
            ASSERT_EQ(g.threads % 32, 0);
            ASSERT_LE(g.threads, kRmsNormBlock);
            ASSERT_EQ(g.rpb * g.tpr, g.threads);
            // A group wider than a warp must own the whole block (its sum is a block reduction).
            if (g.tpr > 32) {
                ASSERT_EQ(g.rpb, 1);
            }
            ASSERT_LE(rmsnorm_bwd_smem_bytes(g, cols) + 128, 48 * 1024);
            // Simulate the lanes: vector v is visited by lane v % tpr at step v / tpr.
            std::vector<int> seen(static_cast<size_t>(nvec), 0);
            for (int lane = 0; lane < g.tpr; ++lane)
                for (int k = 0; k < g.maxv; ++k) {
                    const int64_t v = lane + int64_t{k} * g.tpr;
                    if (v < nvec) ++seen[static_cast<size_t>(v)];
                }
            for (int64_t v = 0; v < nvec; ++v)
                ASSERT_EQ(seen[static_cast<size_t>(v)], 1) << "vector " << v;
        }
    }
}

TEST(RmsNormGeometry, BackwardSplitCoversEveryRowOnce) {
    for (int64_t cols : {1, 3, 64, 128, 1000, 1001, 4096, 8192}) {
        for (bool vec8 : {false, true}) {
            if (vec8 && cols % 8 != 0) continue;
            const RmsNormGeometry g = rmsnorm_geometry(cols, vec8);
            for (int64_t rows : {1, 2, 3, 31, 32, 33, 255, 257, 1023, 1024, 1025, 4097, 16384,
                                 65537, 524288, 524289}) {
                SCOPED_TRACE(::testing::Message()
                             << "cols " << cols << " vec " << g.vec << " rows " << rows);
                const RmsNormBwdSplit s = rmsnorm_bwd_split(rows, g);
                ASSERT_GE(s.blocks, 1);
                ASSERT_LE(s.blocks, 8192);
                ASSERT_LE(s.blocks, rows);
                // Enough blocks to fill the GPU while row groups last; one or two reduction passes.
                ASSERT_GE(s.blocks, std::min<int64_t>(264, (rows + g.rpb - 1) / g.rpb));
                ASSERT_EQ(s.reduce_groups, (s.blocks + 255) / 256);
                ASSERT_LE(s.reduce_groups, 32);
                // Consecutive, non-empty row ranges from 0 to rows.
                ASSERT_EQ(rmsnorm_bwd_first_row(0, rows, s.blocks), 0);
                ASSERT_EQ(rmsnorm_bwd_first_row(s.blocks, rows, s.blocks), rows);
                for (int64_t b = 0; b < s.blocks; ++b)
                    ASSERT_LT(rmsnorm_bwd_first_row(b, rows, s.blocks),
                              rmsnorm_bwd_first_row(b + 1, rows, s.blocks))
                        << "block " << b;
                ASSERT_GE(rmsnorm_bwd_workspace_floats(rows, cols),
                          (s.blocks + s.reduce_groups) * cols);
            }
        }
    }
    EXPECT_EQ(rmsnorm_bwd_workspace_floats(0, 64), 0);
}

TEST(RmsNormGeometry, TypicalShapes) {
    // Per-head norm, Dh = 64 / 128: 8 / 16 threads per row, 32 / 16 rows per block.
    EXPECT_EQ(rmsnorm_geometry(64, true).tpr, 8);
    EXPECT_EQ(rmsnorm_geometry(64, true).rpb, 32);
    EXPECT_EQ(rmsnorm_geometry(128, true).tpr, 16);
    // Hidden 4096 / 8192: one block of 128 / 256 threads per row, 4 vectors per thread.
    EXPECT_EQ(rmsnorm_geometry(4096, true).threads, 128);
    EXPECT_EQ(rmsnorm_geometry(8192, true).threads, 256);
    EXPECT_EQ(rmsnorm_geometry(4096, true).maxv, 4);
    // Backward at the training shapes: [16384, 4096] in 512 blocks of 32 rows; the per-head
    // [16384 * 32, 128] in 8192 blocks of 64 rows (4 rounds of 16 rows).
    EXPECT_EQ(rmsnorm_bwd_split(16384, rmsnorm_geometry(4096, true)).blocks, 512);
    EXPECT_EQ(rmsnorm_bwd_split(16384 * 32, rmsnorm_geometry(128, true)).blocks, 8192);
}

}  // namespace
}  // namespace dflash::cuda::kernels

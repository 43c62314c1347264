// rows_linear's kernel: the products of a decode or verify step (1 to 16 rows) against whole
// weights, reading each weight once at close to HBM bandwidth, with the step's epilogue (residual
// add, SwiGLU, f32 logits) applied on the way out. bf16 mma.sync m16n8k16 with fp32 accumulation,
// built from the attention kernels' wrappers (attention_mma.cuh), so it also runs on their CPU
// emulator (tests/ops/rows_linear_emu_test.cpp).
//
// Why not cuBLASLt: at 1-16 rows its kernels (nvjet 64x8) reached 25-30% of HBM bandwidth on the
// decode step's 2-6 MB weights (docs/performance.md, round 10b), and every projection was a launch
// of its own; here q/k/v are one launch, gate/up/SwiGLU one, and the residual add rides in the
// epilogue.
//
// Note [rows_linear layout]: a block covers 8·NT columns of y and the whole of k; its 8 warps take
// the 64-wide k chunks c = warp, warp + 8, ... Lane (g, t) copies 16 bytes of weight row
// col0 + 8j + g at k = 64c + 32u + 8t for u = 0, 1 and each n-tile j, and the same bytes of x
// rows g and g + 8 (zero-filled for rows >= R, which are never read; rows 8-15 not copied at all
// when R <= 8), with cp.async into its own slots of its warp's ring in shared memory: kStages
// chunks in flight a warp, without registers held for them. One copy instruction reads 64
// contiguous bytes of each of 8 rows (whole 32-byte sectors), the two of a chunk a row's whole
// 128-byte line. What sets the speed is the weight bytes in flight a SM (docs/performance.md
// "rows_linear: bytes in flight"), so tiles are 8 or 16 columns and every shape keeps two blocks a
// SM. (Loading into registers, two chunks at a time, reached half of HBM bandwidth at the 8B
// shape; x through registers one chunk ahead, the ring holding weights only, was slower at every
// shape; a lane's two items side by side (sectors half used by each instruction), or one block a
// SM, was 1.5-3x slower: docs/performance.md.) The reduction over k may be permuted as long as x
// and W are permuted alike: each 16-byte item feeds two m16n8k16 products whose k slots 2t, 2t+1,
// 2t+8, 2t+9 hold its values 0-3, then 4-7, so one item is a whole fragment and a lane reads back
// only what it copied. The warps' partial sums meet in shared memory and are added in warp order.
//
// Note [rows_linear row invariance]: every output is the fp32 sum of the same products in the
// same order: per warp its chunks in ascending order, four products each, then the warps 0..7 in
// order. That order depends on k alone, not on the rows, the columns a block covers or the other
// rows of the fragment (the tensor cores keep rows apart), so a decode row and the same row in a
// verify block have the same bits.
#include "backend/cuda/kernels/attention_mma.cuh"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/rows_linear.h"

namespace dflash::cuda::rows {
namespace {

using attn::bf16_to_float;
using attn::float_to_bf16;
using attn::mma16816;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kSub = 2;             // 16-byte items a lane copies per weight row per chunk
constexpr int kChunkK = 32 * kSub;  // k per warp step: 4 lanes x kSub items of 8 values
constexpr int kMaxRows = 16;
constexpr int kMinBlocks = 264;  // two a SM on an H200's 132

__device__ __forceinline__ float silu_times(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}

// A stage's 16-byte slots a lane owns: x rows g (kSub), g + 8 (kSub), then its weight rows.
template <int NT, bool kPair>
constexpr int kWeightItems = (kPair ? 2 : 1) * NT* kSub;
template <int NT, bool kPair>
constexpr int kItems = 2 * kSub + kWeightItems<NT, kPair>;
// Chunks in flight per warp (one stage is being read): 1 KB of weights a stage in 4 stages, or
// 2 KB in 3; 48-64 KB of weights in flight a SM with two blocks of 104-112 KB each.
template <int NT, bool kPair>
constexpr int kStages = kItems<NT, kPair> <= 6 ? 4 : 3;
template <int NT, bool kPair>
constexpr int kRingBytes = kWarps* kStages<NT, kPair>* kItems<NT, kPair> * 32 * 16;

// The partial sums of one tile: kMats x 8 warps x 16 rows x 8NT floats (two of them, after the
// ring: consecutive tiles alternate).
template <int NT, bool kPair>
constexpr int kRedBytes = (kPair ? 2 : 1) * kWarps* kMaxRows * 8 * NT * 4;
template <int NT, bool kPair>
constexpr int kSmemBytes = kRingBytes<NT, kPair> + 2 * kRedBytes<NT, kPair>;

// Where column tile `tile` falls: its first column of y, the weight (segment) and that weight's
// first row in the tile (tiles never straddle two segments: rows_tile_cols).
struct TileAt {
    int col0, seg, base;
};
template <int kCols>
__device__ __forceinline__ TileAt tile_at(const RowsArgs& a, int tile) {
    TileAt at{tile * kCols, 0, tile * kCols};
    while (at.seg + 1 < a.nseg && at.base >= a.n[at.seg]) at.base -= a.n[at.seg++];
    return at;
}

// NT n-tiles of 8 columns; kPair: also the same columns of w[1] (SwiGLU's up). A block works
// through the column tiles blockIdx.x, blockIdx.x + gridDim.x, ...; each warp streams its
// (tile, chunk) items through a ring of kStages cp.async groups in shared memory (Note
// [rows_linear layout]), running ahead into the next tile while the block reduces the current
// one, so the memory pipe stays full across tiles. A lane reads back only the bytes it copied, so
// the warps wait for each other only at each tile's reduction. The issue side keeps its place
// (tile, chunk, stage, the lane's weight rows) in counters, so a chunk costs no division.
template <int NT, bool kPair>
__global__ void __launch_bounds__(kThreads) rows_kernel(const RowsArgs a, int tiles) {
    DF_ATTN_SHARED(smem);
    constexpr int kCols = 8 * NT;
    constexpr int kMats = kPair ? 2 : 1;
    constexpr int kIt = kItems<NT, kPair>;
    constexpr int kS = kStages<NT, kPair>;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int first = static_cast<int>(blockIdx.x), step = static_cast<int>(gridDim.x);
    const int my_tiles = first < tiles ? (tiles - first + step - 1) / step : 0;
    const int nchunks = (a.k + kChunkK - 1) / kChunkK;
    const int mine = warp < nchunks ? (nchunks - warp + kWarps - 1) / kWarps : 0;
    const bool hi_rows = a.rows > 8;  // the block's x rows 8-15 exist (uniform in the block)
    const bool lo_ok = g < a.rows, hi_ok = g + 8 < a.rows;
    const uint16_t* x_lo = a.x + static_cast<size_t>(lo_ok ? g : 0) * a.k;
    const uint16_t* x_hi = a.x + static_cast<size_t>(hi_ok ? g + 8 : 0) * a.k;
    // This lane's slot of item `it` in stage `st` (lanes side by side: no bank conflicts).
    const uint32_t ring = static_cast<uint32_t>(warp * kS * kIt * 32 * 16);
    auto slot = [&](int st, int it) {
        return ring + static_cast<uint32_t>(((st * kIt + it) * 32 + lane) * 16);
    };
    const uint32_t smem_base = attn::smem_u32(smem);

    // The issue side's place: the next item is chunk iq of this block's tile it_tile (counted
    // from 0), into stage ist; wrow: this lane's weight rows in that tile (null past a segment's
    // end).
    int it_tile = 0, iq = 0, ist = 0;
    const uint16_t* wrow[kMats][NT];
    auto point_at = [&](int tt) {
        const TileAt at = tile_at<kCols>(a, first + tt * step);
        const int nrows = a.n[at.seg];
        DF_ATTN_UNROLL
        for (int m = 0; m < kMats; ++m) {
            const uint16_t* w = m == 0 ? a.w[at.seg] : a.w[1];
            DF_ATTN_UNROLL
            for (int jt = 0; jt < NT; ++jt) {
                const int n = at.base + 8 * jt + g;
                wrow[m][jt] = n < nrows ? w + static_cast<size_t>(n) * a.k : nullptr;
            }
        }
    };
    auto start = [&]() {
        it_tile = iq = ist = 0;
        if (my_tiles > 0 && mine > 0) point_at(0);
    };
    start();
    // The next item's copies if this warp has one left (its x rows, its weight rows, or both),
    // then the issue side moves on; with `commit`, they close a cp.async group (empty when the
    // warp has no item left).
    auto issue = [&](bool xs, bool weights, bool commit) {
        if (it_tile < my_tiles && mine > 0) {
            const int k0 = (warp + iq * kWarps) * kChunkK + 8 * t;
            DF_ATTN_UNROLL
            for (int u = 0; u < kSub; ++u) {
                const int k = k0 + 32 * u;
                const bool kv = k < a.k;  // k is a multiple of 8: an item is all in or all out
                if (xs) {
                    attn::cp_async16(smem_base + slot(ist, u), kv && lo_ok ? x_lo + k : a.x,
                                     kv && lo_ok);
                    if (hi_rows)
                        attn::cp_async16(smem_base + slot(ist, kSub + u),
                                         kv && hi_ok ? x_hi + k : a.x, kv && hi_ok);
                }
                if (!weights) continue;
                DF_ATTN_UNROLL
                for (int m = 0; m < kMats; ++m) {
                    DF_ATTN_UNROLL
                    for (int jt = 0; jt < NT; ++jt) {
                        const uint16_t* r = wrow[m][jt];
                        const bool ok = kv && r != nullptr;
                        attn::cp_async16(smem_base + slot(ist, 2 * kSub + (m * NT + jt) * kSub + u),
                                         ok ? r + k : a.x, ok);
                    }
                }
            }
            ist = ist + 1 == kS ? 0 : ist + 1;
            if (++iq == mine) {
                iq = 0;
                if (++it_tile < my_tiles) point_at(it_tile);
            }
        }
        if (commit) attn::cp_async_commit();
    };
    // The first kS - 1 stages' weight rows go out before the wait: no kernel of a step writes a
    // weight, so with programmatic dependent launch they stream in while the kernel before this
    // one still runs (Note [Programmatic dependent launch]). x and the residual come from that
    // kernel, so their copies wait; the issue side then walks the same items again for x alone.
    // The first group holds every early weight copy, so waiting for stage 0 waits for them all.
    DF_ATTN_UNROLL
    for (int j = 0; j < kS - 1; ++j) issue(false, true, false);
    pdl::wait();
    pdl::launch_dependents();
    start();
    DF_ATTN_UNROLL
    for (int j = 0; j < kS - 1; ++j) issue(true, false, true);

    const int cols = a.epilogue == kStore ? a.n[0] + a.n[1] + a.n[2] : a.n[0];
    const uint4 zero{0, 0, 0, 0};
    int st = 0;  // the consuming side's stage
    for (int tt = 0; tt < my_tiles; ++tt) {
        float acc[kMats][NT][4];
        DF_ATTN_UNROLL
        for (int m = 0; m < kMats; ++m) {
            DF_ATTN_UNROLL
            for (int jt = 0; jt < NT; ++jt) {
                DF_ATTN_UNROLL
                for (int e = 0; e < 4; ++e) acc[m][jt][e] = 0.0f;
            }
        }
        for (int q = 0; q < mine; ++q) {
            issue(true, true, true);
            attn::cp_async_wait<kS - 1>();  // the chunk in stage st has landed
            DF_ATTN_UNROLL
            for (int u = 0; u < kSub; ++u) {
                const uint4 xa = *reinterpret_cast<const uint4*>(smem + slot(st, u));
                const uint4 xb =
                    hi_rows ? *reinterpret_cast<const uint4*>(smem + slot(st, kSub + u)) : zero;
                const uint32_t a0[4] = {xa.x, xb.x, xa.y, xb.y};
                const uint32_t a1[4] = {xa.z, xb.z, xa.w, xb.w};
                DF_ATTN_UNROLL
                for (int m = 0; m < kMats; ++m) {
                    DF_ATTN_UNROLL
                    for (int jt = 0; jt < NT; ++jt) {
                        const uint4 w = *reinterpret_cast<const uint4*>(
                            smem + slot(st, 2 * kSub + (m * NT + jt) * kSub + u));
                        mma16816(acc[m][jt], a0, w.x, w.y);
                        mma16816(acc[m][jt], a1, w.z, w.w);
                    }
                }
            }
            st = st + 1 == kS ? 0 : st + 1;
        }
        // Partial sums: red[m][warp][row][col], in the buffer of this tile's parity (the other's
        // readers, two tiles back, finished before the last tile's barrier).
        float* red = reinterpret_cast<float*>(smem + kRingBytes<NT, kPair> +
                                              (tt & 1) * kRedBytes<NT, kPair>);
        DF_ATTN_UNROLL
        for (int m = 0; m < kMats; ++m) {
            DF_ATTN_UNROLL
            for (int jt = 0; jt < NT; ++jt) {
                DF_ATTN_UNROLL
                for (int e = 0; e < 4; ++e) {
                    const int row = g + 8 * (e >> 1), col = 8 * jt + 2 * t + (e & 1);
                    red[((m * kWarps + warp) * kMaxRows + row) * kCols + col] = acc[m][jt][e];
                }
            }
        }
        __syncthreads();
        const TileAt at = tile_at<kCols>(a, first + tt * step);
        const int nrows = a.n[at.seg];
        for (int i = tid; i < a.rows * kCols; i += kThreads) {
            const int row = i / kCols, col = i % kCols, yc = at.col0 + col;
            if (at.base + col >= nrows) continue;
            float s[kMats];
            DF_ATTN_UNROLL
            for (int m = 0; m < kMats; ++m) {
                s[m] = 0.0f;
                for (int w = 0; w < kWarps; ++w)
                    s[m] += red[((m * kWarps + w) * kMaxRows + row) * kCols + col];
            }
            const size_t out = static_cast<size_t>(row) * cols + yc;
            if (a.y_f32) {
                static_cast<float*>(a.y)[out] = s[0];
                continue;
            }
            float v = s[0];
            if (a.epilogue == kAdd) {
                v = bf16_to_float(a.residual[out]) + s[0];
            } else if (kPair) {
                v = silu_times(bf16_to_float(float_to_bf16(s[0])),
                               bf16_to_float(float_to_bf16(s[kMats - 1])));
            }
            static_cast<uint16_t*>(a.y)[out] = float_to_bf16(v);
        }
    }
    attn::cp_async_wait<0>();  // only empty groups remain
}

template <int NT, bool kPair>
void launch(const RowsArgs& a, int cols, CUstream_st* stream) {
    constexpr int smem = kSmemBytes<NT, kPair>;
    // Resident blocks a SM: shared memory (227 KB a block at most, 228 KB a SM on Hopper) and
    // registers (at most 64 a thread: four blocks of 256 threads) allow.
    constexpr int kPerSm = (228 * 1024) / (smem + 1024) < 4 ? (228 * 1024) / (smem + 1024) : 4;
    static_assert(kPerSm >= 2 && smem <= 227 * 1024);
    const int tiles = (cols + 8 * NT - 1) / (8 * NT);
    const int blocks = tiles < kPerSm * a.sm_count ? tiles : kPerSm * a.sm_count;
    constexpr auto kernel = rows_kernel<NT, kPair>;  // (a template's comma would split the macro)
    DF_PDL_LAUNCH(a.pdl, kernel, dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream,
                  a, tiles);
}

}  // namespace

int rows_tile_cols(const RowsArgs& a) {
    // 16 columns (2 KB of weights a warp's stage against 1 KB) only where its tiles still come
    // in at least two per block: a last round of tiles that fills a fraction of the blocks costs
    // more than the wider stages gain (an 8B target's 6144 q/k/v columns: 384 tiles of 16 over
    // 264 blocks). SwiGLU's pair already moves 2 KB a stage at 8 columns.
    if (a.epilogue == kSwiglu) return 8;
    const int total = a.epilogue == kStore ? a.n[0] + a.n[1] + a.n[2] : a.n[0];
    bool wide = (total + 15) / 16 >= 2 * kMinBlocks;
    for (int i = 0; i + 1 < a.nseg; ++i) wide = wide && a.n[i] % 16 == 0;
    return wide ? 16 : 8;
}

void rows_linear(const RowsArgs& a, CUstream_st* stream) {
    if (a.rows <= 0) return;
    const int cols = a.epilogue == kStore ? a.n[0] + a.n[1] + a.n[2] : a.n[0];
    if (a.epilogue == kSwiglu) {
        launch<1, true>(a, cols, stream);
    } else if (rows_tile_cols(a) == 16) {
        launch<2, false>(a, cols, stream);
    } else {
        launch<1, false>(a, cols, stream);
    }
}

}  // namespace dflash::cuda::rows

// The grouping of moe_experts (kernels/moe.h: sort_pairs, grouped_gemm): the counting sort of the
// (token, pick) pairs by expert, and the grouped expert GEMMs, one launch covering every expert,
// each block one (expert, 64-row tile, 128-column tile). bf16 mma.sync m16n8k16 with fp32
// accumulation, a 4-deep ring of cp.async tiles, built from the attention kernels' building blocks
// (attention_mma.cuh), so this file also runs on their CPU emulator. Tested by
// tests/cuda/moe_cuda_test.cpp and tests/ops/moe_emu_test.cpp (the emulator).
//
// Why our own kernel and not cuBLASLt's grouped or batched GEMM: the row counts per expert live
// on the device (the sort's offsets; reading them on the host would break graph capture), and
// cuBLAS may pick another algorithm, with another reduction order, for another row count, so a
// token's output would change with the number of tokens that share its experts.
//
// Note [moe row invariance]: every output element is the fp32 sum over the reduction dimension
// in one fixed order: 64-wide slices in ascending order, within a slice four m16n8k16 steps in
// ascending order, each adding its 16 products into the accumulator. That order depends on
// nothing but kdim: not on the expert's row count, the tile the row falls in or its place in
// the tile (the tensor cores treat every row of a fragment alike, and rows never mix). Blocks
// whose warps have no rows skip the products, which changes no other row.
//
// Layout: a block is 4 warps; warp w owns rows 16w..16w+15 of the tile and all 128 columns
// (fragment layout as Note [Attention smem tiles]). B's tile rows are weight rows: for the
// gated GEMM rows 0..63 are gate units u0.., rows 64..127 the up units u0.. (weight rows I + u0..),
// so a thread's accumulators c[n] and c[n + 8] hold the gate and up of the same (row, unit) and
// the activation runs in registers.
//
// Note [moe MXFP4 tiles]: with MXFP4 weights (gpt-oss) no bf16 copy of the experts exists: the
// B tile of each slice is decoded from the blocks on its way into shared memory, into the very
// bf16 values (kernels/moe.h: mxfp4_bf16) the bf16 path would have loaded, in the same swizzled
// places, so the products and their order, and the bits, are the bf16 path's. The activations
// keep their cp.async ring; the weights take plain loads into registers (a 16-byte chunk of bf16 is
// 4 bytes of codes and its group's scale byte) and are converted and stored two slices later:
// each iteration issues the loads of slice t + 3, multiplies slice t, then decodes slice t + 2
// (loaded the iteration before) into its stage, which slice t - 2 freed. Two slices of weight
// loads are in flight behind every multiply, and the bytes read are a quarter of bf16's.
#include "backend/cuda/kernels/attention_mma.cuh"
#include "backend/cuda/kernels/moe.h"

namespace dflash::cuda::moe {
namespace {

using attn::bf16_to_float;
using attn::cp_async16;
using attn::cp_async_commit;
using attn::cp_async_wait;
using attn::float_to_bf16;
using attn::smem_u32;
using attn::swz;

constexpr int kWarps = kTileRows / 16;
constexpr int kBlockThreads = kWarps * 32;
constexpr int kATileBytes = kTileRows * kTileK * 2;
constexpr int kBTileBytes = kTileCols * kTileK * 2;
constexpr int kStageBytes = kATileBytes + kBTileBytes;
constexpr int kStages = 4;  // slices in flight: 96 KiB of shared memory, two blocks an SM
constexpr int kSmemBytes = kStages * kStageBytes;

__device__ __forceinline__ float sigmoid(float v) {
    return 1.0f / (1.0f + expf(-v));
}

__device__ __forceinline__ float activate(int kind, float g, float u, float limit, float alpha) {
    if (kind == kSwiglu) return g * sigmoid(g) * u;
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    return (u + 1.0f) * g * sigmoid(alpha * g);
}

// ---- the counting sort
// ---------------------------------------------------------------------------

// One block of `warps` warps. Warp w owns the contiguous pairs [w * n / warps, (w + 1) * n /
// warps). Pass 1 counts each warp's pairs per expert (lanes with equal ids found by
// __match_any_sync; the lowest of them adds the group's size), the scan turns the counts into
// each (warp, expert)'s first sorted position, pass 2 hands positions out in pair order. Integer
// counts only: the layout is the same on every run.
__global__ void sort_kernel(const int32_t* __restrict__ ids, int n, int experts,
                            int32_t* __restrict__ offsets, int32_t* __restrict__ tile_offsets,
                            int32_t* __restrict__ sorted_pair, int32_t* __restrict__ slot) {
    DF_ATTN_SHARED(smem);
    // [warps][experts], then totals [experts + 1]
    int32_t* counts = reinterpret_cast<int32_t*>(smem);
    const int warps = blockDim.x >> 5;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int32_t* totals = counts + warps * experts;
    for (int i = threadIdx.x; i < warps * experts; i += blockDim.x) counts[i] = 0;
    __syncthreads();

    const int begin = static_cast<int>(static_cast<int64_t>(n) * warp / warps);
    const int end = static_cast<int>(static_cast<int64_t>(n) * (warp + 1) / warps);
    int32_t* my = counts + warp * experts;
    const unsigned below = (1u << lane) - 1u;
    // Pass 1.
    for (int p0 = begin; p0 < end; p0 += 32) {
        const int p = p0 + lane;
        int e = p < end ? ids[p] : -1;
        if (e >= experts) e = -1;  // outside [0, E): no expert, no position
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        if (e >= 0 && (peers & below) == 0) my[e] += __popc(peers);
        __syncwarp();
    }
    __syncthreads();
    // Per expert: each warp's first position relative to the expert's, and the expert's total.
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
        int32_t run = 0;
        for (int w = 0; w < warps; ++w) {
            const int32_t c = counts[w * experts + e];
            counts[w * experts + e] = run;
            run += c;
        }
        totals[e] = run;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int32_t pos = 0, tiles = 0;
        for (int e = 0; e < experts; ++e) {
            const int32_t c = totals[e];
            offsets[e] = pos;
            tile_offsets[e] = tiles;
            totals[e] = pos;
            pos += c;
            tiles += tiles_of(c);
        }
        offsets[experts] = pos;
        tile_offsets[experts] = tiles;
    }
    __syncthreads();
    // Pass 2.
    for (int p0 = begin; p0 < end; p0 += 32) {
        const int p = p0 + lane;
        int e = p < end ? ids[p] : -1;
        if (e >= experts) e = -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        if (p < end) {
            if (e >= 0) {
                const int32_t pos = totals[e] + my[e] + __popc(peers & below);
                sorted_pair[pos] = p;
                slot[p] = pos;
            } else {
                slot[p] = -1;
            }
        }
        __syncwarp();
        if (e >= 0 && (peers & below) == 0) my[e] += __popc(peers);
        __syncwarp();
    }
}

// What one block works on.
struct TileJob {
    int expert;
    int row0;  // first sorted position
    int rows;  // 1..kTileRows
};

// The weight row behind B-tile row j, or -1 past the matrix: gated tiles take gate units c0 + j
// (j < 64) and up units c0 + j - 64 (weight rows n + unit); plain tiles rows c0 + j.
__device__ __forceinline__ int weight_row(const GroupedGemmArgs& g, int c0, int j) {
    if (g.activation == kNone) return c0 + j < g.n ? c0 + j : -1;
    const int unit = c0 + (j % kGatedUnits);
    if (unit >= g.n) return -1;
    return j < kGatedUnits ? unit : g.n + unit;
}

// Loads reduction slice k0 of the tile's A rows and (bf16 weights, !MX) B rows into one stage.
// ALIGNED: kdim % 8 == 0 and 16-byte aligned bases, so 16-byte chunks are whole and cp.async
// works; otherwise element loads (the same tile contents, zeros past the edges).
template <bool ALIGNED, bool MX>
__device__ __forceinline__ void load_stage(const GroupedGemmArgs& g, const TileJob& job, int c0,
                                           int k0, unsigned char* smem, uint32_t a_tile,
                                           uint32_t b_tile, int tid) {
    constexpr int kChunks = kTileK / 8;
    constexpr int kBRows = MX ? 0 : kTileCols;  // MXFP4 B tiles: mx_fetch / mx_store
    const int64_t wrows = static_cast<int64_t>(g.activation == kNone ? g.n : 2 * g.n);
    const uint16_t* w = g.w + static_cast<int64_t>(job.expert) * wrows * g.kdim;
    // Rows of A as global pointers (nullptr: zero row).
    const auto a_row = [&](int r) -> const uint16_t* {
        if (r >= job.rows) return nullptr;
        const int s = job.row0 + r;
        const int64_t src = g.sorted_pair != nullptr ? g.sorted_pair[s] / g.k_per_row : s;
        return g.a + src * g.kdim;
    };
    const auto b_row = [&](int j) -> const uint16_t* {
        const int wr = weight_row(g, c0, j);
        return wr < 0 ? nullptr : w + static_cast<int64_t>(wr) * g.kdim;
    };
    if constexpr (ALIGNED) {
        for (int idx = tid; idx < (kTileRows + kBRows) * kChunks; idx += kBlockThreads) {
            const bool is_a = idx < kTileRows * kChunks;
            const int i = is_a ? idx : idx - kTileRows * kChunks;
            const int r = i / kChunks, c = i % kChunks;
            const uint16_t* row = is_a ? a_row(r) : b_row(r);
            const bool valid = row != nullptr && k0 + c * 8 < g.kdim;
            const uint32_t dst = (is_a ? a_tile : b_tile) + swz<kTileK>(r, c);
            cp_async16(dst, valid ? row + k0 + c * 8 : g.a, valid);
        }
    } else {
        unsigned char* a_ptr = smem + (a_tile - smem_u32(smem));
        unsigned char* b_ptr = smem + (b_tile - smem_u32(smem));
        for (int idx = tid; idx < (kTileRows + kBRows) * kTileK; idx += kBlockThreads) {
            const bool is_a = idx < kTileRows * kTileK;
            const int i = is_a ? idx : idx - kTileRows * kTileK;
            const int r = i / kTileK, col = i % kTileK;
            const uint16_t* row = is_a ? a_row(r) : b_row(r);
            const uint16_t v = row != nullptr && k0 + col < g.kdim ? row[k0 + col] : uint16_t{0};
            unsigned char* base = is_a ? a_ptr : b_ptr;
            memcpy(base + swz<kTileK>(r, col / 8) + (col % 8) * 2, &v, sizeof(v));
        }
    }
}

// One slice of an MXFP4 B tile in a thread's registers (Note [moe MXFP4 tiles]): the slice's
// 128 rows x 8 chunks of 8 values, chunk idx = tid + i * kBlockThreads; per chunk its 4 bytes of
// codes (value j in bits 4j..4j+3, as the bytes hold them: low nibble first) and its scale,
// four scales to a register (byte i % 4 of scales[i / 4]).
constexpr int kMxItems = kTileCols * (kTileK / 8) / kBlockThreads;
struct MxSlice {
    uint32_t codes[kMxItems];
    uint32_t scales[kMxItems / 4];
};

// Issues the loads of slice k0's MXFP4 B tile (zeros past the matrix: code 0 is +0 at any scale).
__device__ __forceinline__ void mx_fetch(const GroupedGemmArgs& g, const TileJob& job, int c0,
                                         int k0, int tid, MxSlice& s) {
    const int groups = g.kdim / 32;
    const int64_t wrows = static_cast<int64_t>(g.activation == kNone ? g.n : 2 * g.n);
    const int64_t expert_row0 = static_cast<int64_t>(job.expert) * wrows;
    DF_ATTN_UNROLL
    for (int i = 0; i < kMxItems / 4; ++i) s.scales[i] = 0u;
    DF_ATTN_UNROLL
    for (int i = 0; i < kMxItems; ++i) {
        const int idx = tid + i * kBlockThreads;
        const int r = idx / (kTileK / 8), c = idx % (kTileK / 8);
        const int wr = weight_row(g, c0, r);
        s.codes[i] = 0u;
        if (wr >= 0 && k0 + c * 8 < g.kdim) {
            const int64_t group = (expert_row0 + wr) * groups + k0 / 32 + c / 4;
            s.codes[i] = *reinterpret_cast<const uint32_t*>(g.w_blocks + group * 16 + (c % 4) * 4);
            s.scales[i / 4] |= static_cast<uint32_t>(g.w_scales[group]) << (8 * (i % 4));
        }
    }
}

// Decodes a fetched slice into a stage's B tile: chunk (r, c) as 8 bf16 at swz(r, c).
__device__ __forceinline__ void mx_store(const MxSlice& s, unsigned char* b_tile, int tid) {
    DF_ATTN_UNROLL
    for (int i = 0; i < kMxItems; ++i) {
        const int idx = tid + i * kBlockThreads;
        const int r = idx / (kTileK / 8), c = idx % (kTileK / 8);
        const uint32_t scale = (s.scales[i / 4] >> (8 * (i % 4))) & 255u;
        uint32_t w[4];
        mxfp4_bf16x8(s.codes[i], scale, w);
        uint4 v;
        v.x = w[0];
        v.y = w[1];
        v.z = w[2];
        v.w = w[3];
        *reinterpret_cast<uint4*>(b_tile + swz<kTileK>(r, c)) = v;
    }
}

// One pass of the main loop: waits for slice t, starts loading slice t + kStages - 1 (MXFP4
// weights: into `fetch_into`'s registers), multiplies slice t, then (MXFP4) decodes slice
// t + kStages - 2, loaded the pass before into `store_from`, into its stage. The kernel alternates
// two MxSlices between the passes, so no register copy waits for loads still in flight.
template <bool ALIGNED, bool MX>
__device__ __forceinline__ void main_pass(const GroupedGemmArgs& g, const TileJob& job, int c0,
                                          int t, int slices, unsigned char* smem, int tid,
                                          bool warp_has_rows, float (&acc)[kTileCols / 8][4],
                                          MxSlice& fetch_into, const MxSlice& store_from) {
    const uint32_t base = smem_u32(smem);
    const int lane = tid & 31, warp = tid >> 5;
    const auto a_tile = [&](int stage) { return base + stage * kStageBytes; };
    const auto b_tile = [&](int stage) { return base + stage * kStageBytes + kATileBytes; };
    const int cur = t % kStages;
    cp_async_wait<kStages - 2>();
    __syncthreads();
    // The stage refilled now was multiplied in slice t - 1, which every warp has finished (the
    // barrier above).
    const int next = t + kStages - 1;
    if (next < slices) {
        load_stage<ALIGNED, MX>(g, job, c0, next * kTileK, smem, a_tile(next % kStages),
                                b_tile(next % kStages), tid);
        if constexpr (MX) mx_fetch(g, job, c0, next * kTileK, tid, fetch_into);
    }
    cp_async_commit();
    if (warp_has_rows) {
        attn::mma_abt<kTileK, kTileCols / 8, kTileK / 16>(
            acc,
            [&](int ks, uint32_t(&a)[4]) {
                attn::lds_a<kTileK>(a, a_tile(cur), warp * 16, ks, lane);
            },
            b_tile(cur), 0, lane);
    }
    if constexpr (MX) {
        // Slice t + 2 into its stage, which slice t - 2 used: every warp finished that before
        // this pass's barrier, and slice t + 2 is read after two more barriers.
        if (next - 1 < slices)
            mx_store(store_from, smem + ((next - 1) % kStages) * kStageBytes + kATileBytes, tid);
    }
}

// The kernel's variants (one template argument: the launch macro takes no commas).
constexpr int kAlignedLoads = 1;  // cp.async for the bf16 tiles (load_stage's ALIGNED)
constexpr int kMxfp4 = 2;         // MXFP4 weights

template <int MODE>
__global__ void __launch_bounds__(kBlockThreads) grouped_gemm_kernel(const GroupedGemmArgs g) {
    constexpr bool ALIGNED = (MODE & kAlignedLoads) != 0, MX = (MODE & kMxfp4) != 0;
    DF_ATTN_SHARED(smem);
    const int tm = blockIdx.x;
    const int total_tiles = g.tile_offsets[g.experts];
    if (tm >= total_tiles) return;
    TileJob job;
    job.expert = expert_of_tile(g.tile_offsets, g.experts, tm);
    job.row0 = g.offsets[job.expert] + (tm - g.tile_offsets[job.expert]) * kTileRows;
    const int end = g.offsets[job.expert + 1];
    job.rows = end - job.row0 < kTileRows ? end - job.row0 : kTileRows;
    const bool gated = g.activation != kNone;
    const int c0 = blockIdx.y * (gated ? kGatedUnits : kTileCols);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const bool warp_has_rows = warp * 16 < job.rows;

    const uint32_t base = smem_u32(smem);
    const auto a_tile = [&](int stage) { return base + stage * kStageBytes; };
    const auto b_tile = [&](int stage) { return base + stage * kStageBytes + kATileBytes; };

    float acc[kTileCols / 8][4];
    DF_ATTN_UNROLL
    for (int n = 0; n < kTileCols / 8; ++n) {
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
    }

    // A ring of kStages slices: slices t + 1 .. t + kStages - 1 are in flight while slice t is
    // multiplied (a decode step's blocks have one row and stream weights: depth is what feeds
    // them). One commit group per slice, empty past the end, so wait<kStages - 2> always means
    // "slice t has landed".
    const int slices = cdiv(g.kdim, kTileK);
    // MXFP4: the slices fetched but not yet stored (Note [moe MXFP4 tiles]), two in turn.
    [[maybe_unused]] MxSlice pending, other;
    for (int t = 0; t < kStages - 1; ++t) {
        if (t < slices) {
            load_stage<ALIGNED, MX>(g, job, c0, t * kTileK, smem, a_tile(t), b_tile(t), tid);
            if constexpr (MX) {
                // Slices 0 .. kStages - 3 are stored now, the last one in the loop's first pass.
                mx_fetch(g, job, c0, t * kTileK, tid, pending);
                if (t < kStages - 2) mx_store(pending, smem + t * kStageBytes + kATileBytes, tid);
            }
        }
        cp_async_commit();
    }
    for (int t = 0; t < slices; t += 2) {
        main_pass<ALIGNED, MX>(g, job, c0, t, slices, smem, tid, warp_has_rows, acc, other,
                               pending);
        if (t + 1 < slices)
            main_pass<ALIGNED, MX>(g, job, c0, t + 1, slices, smem, tid, warp_has_rows, acc,
                                   pending, other);
    }
    if (!warp_has_rows) return;

    // Epilogue: accumulator c[n][e] holds row g + 8 * (e / 2), column 8n + 2t + (e % 2).
    const int gr = lane >> 2, tq = lane & 3;
    const int64_t bias_stride = gated ? 2 * static_cast<int64_t>(g.n) : g.n;
    const uint16_t* bias =
        g.bias != nullptr ? g.bias + static_cast<int64_t>(job.expert) * bias_stride : nullptr;
    // Fully unrolled with constant indices, so acc stays in registers; a gated tile's columns
    // 64..127 are the up halves, used beside their gate halves.
    DF_ATTN_UNROLL
    for (int n = 0; n < kTileCols / 8; ++n) {
        if (gated && n >= kGatedUnits / 8) continue;
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e) {
            const int r = warp * 16 + gr + 8 * (e >> 1);
            const int col = c0 + 8 * n + 2 * tq + (e & 1);
            if (r >= job.rows || col >= g.n) continue;
            float v = acc[n][e];
            if (gated) {
                float up = acc[(n + kGatedUnits / 8) % (kTileCols / 8)][e];
                if (bias != nullptr) {
                    v += bf16_to_float(bias[col]);
                    up += bf16_to_float(bias[g.n + col]);
                }
                v = activate(g.activation, v, up, g.limit, g.alpha);
            } else if (bias != nullptr) {
                v += bf16_to_float(bias[col]);
            }
            g.out[static_cast<int64_t>(job.row0 + r) * g.n + col] = float_to_bf16(v);
        }
    }
}

}  // namespace

void sort_pairs(const int32_t* ids, int pairs, int experts, const ExpertsScratch& s,
                CUstream_st* stream) {
    if (pairs <= 0) return;
    const int warps = sort_warps(experts, pairs);
    const size_t smem = sizeof(int32_t) * (static_cast<size_t>(warps) * experts + experts + 1);
    DF_ATTN_LAUNCH(sort_kernel, 1, warps * 32, smem, stream, ids, pairs, experts, s.offsets,
                   s.tile_offsets, s.sorted_pair, s.slot);
}

void grouped_gemm(const GroupedGemmArgs& g, CUstream_st* stream) {
    if (g.pairs <= 0 || g.n <= 0) return;
    const int col_tiles = cdiv(g.n, g.activation != kNone ? kGatedUnits : kTileCols);
    const dim3 grid(static_cast<unsigned>(max_row_tiles(g.pairs, g.experts)),
                    static_cast<unsigned>(col_tiles));
    const bool mx = g.w_blocks != nullptr;
    const bool aligned = g.kdim % 8 == 0 && (reinterpret_cast<uintptr_t>(g.a) & 15) == 0 &&
                         (mx || (reinterpret_cast<uintptr_t>(g.w) & 15) == 0);
    const int mode = (aligned ? kAlignedLoads : 0) | (mx ? kMxfp4 : 0);
    if (mode == (kAlignedLoads | kMxfp4)) {
        DF_ATTN_LAUNCH(grouped_gemm_kernel<kAlignedLoads | kMxfp4>, grid, kBlockThreads, kSmemBytes,
                       stream, g);
    } else if (mode == kMxfp4) {
        DF_ATTN_LAUNCH(grouped_gemm_kernel<kMxfp4>, grid, kBlockThreads, kSmemBytes, stream, g);
    } else if (mode == kAlignedLoads) {
        DF_ATTN_LAUNCH(grouped_gemm_kernel<kAlignedLoads>, grid, kBlockThreads, kSmemBytes, stream,
                       g);
    } else {
        DF_ATTN_LAUNCH(grouped_gemm_kernel<0>, grid, kBlockThreads, kSmemBytes, stream, g);
    }
}

}  // namespace dflash::cuda::moe

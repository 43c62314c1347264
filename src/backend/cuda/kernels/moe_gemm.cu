// The grouped expert GEMMs of moe_experts (kernels/moe.h: grouped_gemm): one launch covers every
// expert, each block one (expert, 64-row tile, 128-column tile). bf16 mma.sync m16n8k16 with fp32
// accumulation, double-buffered cp.async tiles, built from the attention kernels' building blocks
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
#include "backend/cuda/kernels/attention_mma.cuh"
#include "backend/cuda/kernels/moe.h"

namespace dflash::cuda::moe {
namespace {

using attn::cp_async16;
using attn::cp_async_commit;
using attn::cp_async_wait;
using attn::smem_u32;
using attn::swz;

constexpr int kWarps = kTileRows / 16;
constexpr int kBlockThreads = kWarps * 32;
constexpr int kATileBytes = kTileRows * kTileK * 2;
constexpr int kBTileBytes = kTileCols * kTileK * 2;
constexpr int kStageBytes = kATileBytes + kBTileBytes;
constexpr int kSmemBytes = 2 * kStageBytes;

__device__ __forceinline__ float bf16_to_float(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// Round to nearest even (NaN stays NaN), as pack_bf16 does.
__device__ __forceinline__ uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

__device__ __forceinline__ float sigmoid(float v) {
    return 1.0f / (1.0f + expf(-v));
}

__device__ __forceinline__ float activate(int kind, float g, float u, float limit, float alpha) {
    if (kind == kSwiglu) return g * sigmoid(g) * u;
    g = fminf(g, limit);
    u = fminf(fmaxf(u, -limit), limit);
    return (u + 1.0f) * g * sigmoid(alpha * g);
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

// Loads reduction slice k0 of the tile's A rows and B rows into one stage. ALIGNED: kdim % 8 == 0
// and 16-byte aligned bases, so 16-byte chunks are whole and cp.async works; otherwise element
// loads (the same tile contents, zeros past the edges).
template <bool ALIGNED>
__device__ __forceinline__ void load_stage(const GroupedGemmArgs& g, const TileJob& job, int c0,
                                           int k0, unsigned char* smem, uint32_t a_tile,
                                           uint32_t b_tile, int tid) {
    constexpr int kChunks = kTileK / 8;
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
        for (int idx = tid; idx < (kTileRows + kTileCols) * kChunks; idx += kBlockThreads) {
            const bool is_a = idx < kTileRows * kChunks;
            const int i = is_a ? idx : idx - kTileRows * kChunks;
            const int r = i / kChunks, c = i % kChunks;
            const uint16_t* row = is_a ? a_row(r) : b_row(r);
            const bool valid = row != nullptr && k0 + c * 8 < g.kdim;
            const uint32_t dst = (is_a ? a_tile : b_tile) + swz<kTileK>(r, c);
            cp_async16(dst, valid ? row + k0 + c * 8 : g.w, valid);
        }
    } else {
        unsigned char* a_ptr = smem + (a_tile - smem_u32(smem));
        unsigned char* b_ptr = smem + (b_tile - smem_u32(smem));
        for (int idx = tid; idx < (kTileRows + kTileCols) * kTileK; idx += kBlockThreads) {
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

template <bool ALIGNED>
__global__ void __launch_bounds__(kBlockThreads) grouped_gemm_kernel(const GroupedGemmArgs g) {
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

    const int slices = cdiv(g.kdim, kTileK);
    load_stage<ALIGNED>(g, job, c0, 0, smem, a_tile(0), b_tile(0), tid);
    cp_async_commit();
    for (int t = 0; t < slices; ++t) {
        const int cur = t & 1;
        if (t + 1 < slices) {
            // The other stage was last read in slice t - 1, which every warp has finished (the
            // barrier at the end of the loop).
            load_stage<ALIGNED>(g, job, c0, (t + 1) * kTileK, smem, a_tile(cur ^ 1),
                                b_tile(cur ^ 1), tid);
            cp_async_commit();
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        if (warp_has_rows) {
            attn::mma_abt<kTileK, kTileCols / 8, kTileK / 16>(
                acc,
                [&](int ks, uint32_t(&a)[4]) {
                    attn::lds_a<kTileK>(a, a_tile(cur), warp * 16, ks, lane);
                },
                b_tile(cur), 0, lane);
        }
        __syncthreads();
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

void grouped_gemm(const GroupedGemmArgs& g, CUstream_st* stream) {
    if (g.pairs <= 0 || g.n <= 0) return;
    const int col_tiles = cdiv(g.n, g.activation != kNone ? kGatedUnits : kTileCols);
    const dim3 grid(static_cast<unsigned>(max_row_tiles(g.pairs, g.experts)),
                    static_cast<unsigned>(col_tiles));
    const bool aligned = g.kdim % 8 == 0 && (reinterpret_cast<uintptr_t>(g.a) & 15) == 0 &&
                         (reinterpret_cast<uintptr_t>(g.w) & 15) == 0;
    if (aligned) {
        DF_ATTN_LAUNCH(grouped_gemm_kernel<true>, grid, kBlockThreads, kSmemBytes, stream, g);
    } else {
        DF_ATTN_LAUNCH(grouped_gemm_kernel<false>, grid, kBlockThreads, kSmemBytes, stream, g);
    }
}

}  // namespace dflash::cuda::moe

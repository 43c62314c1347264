// Raw launchers of the CUDA mixture-of-experts kernels (moe.cu: routing, the weighted gather and
// the whole moe_experts; moe_grouped.cu: the counting sort of the (token, pick) pairs by expert
// and the grouped expert GEMMs).
// Device pointers, sizes and a stream; no fmt, no Tensor (Note [No fmt in .cu files] in
// cuda_check.h): the Tensor-level checks live in backend/cuda/moe.cpp. bf16 tensors are passed as
// uint16_t*. Tested by tests/cuda/moe_cuda_test.cpp and, for the grouped GEMMs on the CPU
// emulator, tests/ops/moe_emu_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

#if defined(__CUDACC__) || defined(DF_ATTN_EMULATE)
#define DF_MOE_HD __host__ __device__
#else
#define DF_MOE_HD
#endif

namespace dflash::cuda::moe {

// ---- limits and tile arithmetic (shared by the kernels, the op and the tests)
// --------------------
constexpr int kMaxK = 32;          // picks per token (the routing kernel keeps them in registers)
constexpr int kMaxExperts = 2048;  // the sort's per-warp count table lives in shared memory
constexpr int kTileRows = 64;      // rows (pairs) of one grouped-GEMM block: 4 warps of 16
constexpr int kTileK = 64;         // reduction slice loaded per pipeline stage
constexpr int kTileCols = 128;     // B rows of one block: 128 outputs, or 64 gate + 64 up units
constexpr int kGatedUnits = kTileCols / 2;

DF_MOE_HD inline int cdiv(int a, int b) {
    return (a + b - 1) / b;
}

// Row tiles of an expert with `rows` pairs.
DF_MOE_HD inline int tiles_of(int rows) {
    return cdiv(rows, kTileRows);
}

// An upper bound on the row tiles of all experts together for n pairs over E experts (the
// grouped GEMMs' grid: blocks past the real count return at once). Each nonempty expert wastes
// less than one tile, and no tile is empty.
DF_MOE_HD inline int max_row_tiles(int n, int experts) {
    const int bound = tiles_of(n) + (experts < n ? experts : n);
    return bound < n ? bound : n;
}

// The expert whose row tiles hold tile tm: the e with tile_off[e] <= tm < tile_off[e + 1]
// (tile_off [E + 1] ascending; empty experts have equal neighbours and are skipped).
DF_MOE_HD inline int expert_of_tile(const int32_t* tile_off, int experts, int tm) {
    int lo = 0, hi = experts;  // the answer lies in [lo, hi)
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (tile_off[mid] <= tm) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Warps of the sort kernel for `pairs` pairs over E experts: its count table holds warps * E ints
// (32 KiB at most), and a warp gets at least 64 pairs (a decode step's few pairs need one warp).
DF_MOE_HD inline int sort_warps(int experts, int pairs) {
    const int by_table = 8192 / (experts > 0 ? experts : 1);
    const int by_pairs = cdiv(pairs > 0 ? pairs : 1, 64);
    const int w = by_table < by_pairs ? by_table : by_pairs;
    return w < 1 ? 1 : (w > 32 ? 32 : w);
}

// ---- MXFP4 (backend/mxfp4.h)
// ----------------------------------------------------------------------

// The bf16 bits of e2m1 code `code` (4 bits) times 2^(scale - 127): decode_mxfp4's value, which is
// exact in bf16 (one or two significant bits), so this is f32_to_bf16 of it bit for bit: zeros
// keep their sign, values below 2^-126 are subnormal, and values of 2^128 and more are infinite.
// Built from integer fields, no float arithmetic (no flush-to-zero or rounding mode matters).
DF_MOE_HD inline uint32_t mxfp4_bf16(uint32_t code, uint32_t scale) {
    const uint32_t sign = (code & 8u) << 12;
    const uint32_t m = code & 7u;  // 0, 0.5, 1, 1.5, 2, 3, 4, 6
    if (m == 0u) return sign;
    // m = 2^p * (1 + h / 2): p = -1 for 0.5, 0 for 1 and 1.5, 1 for 2 and 3, 2 for 4 and 6.
    const int biased = static_cast<int>(scale) + static_cast<int>(m >> 1) - 1;
    const uint32_t h = (m & 1u) & (m > 1u ? 1u : 0u);
    if (biased >= 255) return sign | 0x7f80u;
    if (biased >= 1) return sign | (static_cast<uint32_t>(biased) << 7) | (h << 6);
    // Subnormal (biased 0 or -1): (2 + h) * 2^(biased + 5) units of 2^-133.
    return sign | ((2u + h) << (biased + 5));
}

// __byte_perm: byte i of the result is byte (s >> 4i) & 7 of the 8 bytes {x, y} (x the low
// four). The host's copy is for the emulator and the tests.
DF_MOE_HD inline uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
    return __byte_perm(x, y, s);
#else
    const uint64_t xy = (static_cast<uint64_t>(y) << 32) | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; ++i)
        r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * i)) & 7u))) & 0xffu) << (8 * i);
    return r;
#endif
}

// The 8 values of 4 bytes of codes (value j in bits 4j..4j+3) at one scale, two bf16 a word
// (value 2w in the low half of out[w]): mxfp4_bf16 of each. Where the scale keeps every value
// normal (2 <= scale <= 252) four magnitudes at a time go through byte-permute tables: a value is
// U(m) + ((scale - 1) << 7) (U: the exponent offset and mantissa bit of magnitude m), zeroed for
// m = 0, with its sign bit; other scales take mxfp4_bf16 value by value.
DF_MOE_HD inline void mxfp4_bf16x8(uint32_t codes, uint32_t scale, uint32_t (&out)[4]) {
    if (scale < 2u || scale > 252u) {
        for (int w = 0; w < 4; ++w)
            out[w] = mxfp4_bf16((codes >> (8 * w)) & 15u, scale) |
                     (mxfp4_bf16((codes >> (8 * w + 4)) & 15u, scale) << 16);
        return;
    }
    // U(m) for m = 0..7: 0, 0x000, 0x080, 0x0c0, 0x100, 0x140, 0x180, 0x1c0 (low and high bytes),
    // and a 0xff byte for every m but 0.
    constexpr uint32_t kLo0 = 0xc0800000u, kLo1 = 0xc0804000u;
    constexpr uint32_t kHi0 = 0x00000000u, kHi1 = 0x01010101u;
    constexpr uint32_t kNz0 = 0xffffff00u, kNz1 = 0xffffffffu;
    const uint32_t add = ((scale - 1u) << 7) * 0x00010001u;
    for (int h = 0; h < 2; ++h) {
        const uint32_t four = codes >> (16 * h);  // values 4h .. 4h + 3 in the low 16 bits
        const uint32_t sel = four & 0x7777u;
        const uint32_t lo = byte_perm(kLo0, kLo1, sel), hi = byte_perm(kHi0, kHi1, sel);
        const uint32_t nz = byte_perm(kNz0, kNz1, sel);
        for (int p = 0; p < 2; ++p) {
            // Bytes lo[2p], hi[2p], lo[2p + 1], hi[2p + 1]: the pair's two U values.
            const uint32_t u = byte_perm(lo, hi, p == 0 ? 0x5140u : 0x7362u);
            const uint32_t mask = byte_perm(nz, 0u, p == 0 ? 0x1100u : 0x3322u);
            const uint32_t sign = (((four >> (8 * p)) & 0x88u) * 0x01001000u) & 0x80008000u;
            out[2 * h + p] = ((u + add) & mask) | sign;
        }
    }
}

// ---- launchers
// ------------------------------------------------------------------------------------
enum RouterKind : int { kSoftmaxTopk = 0, kTopkSoftmax = 1 };
enum Activation : int { kNone = 0, kSwiglu = 1, kClampedSwiglu = 2 };

// logits f32 [rows, experts] -> ids i32 [rows, k], weights f32 [rows, k] (backend/op_list.h:
// moe_route). One warp per row; k <= kMaxK.
void route(const float* logits, int rows, int experts, int k, int kind, bool normalize,
           int32_t* ids, float* weights, CUstream_st* stream);

// The device memory moe_experts needs (one carve, 256-byte aligned pieces).
struct ExpertsScratch {
    int32_t* offsets = nullptr;       // [E + 1]: expert e's pairs sit at [offsets[e], offsets[e+1])
    int32_t* tile_offsets = nullptr;  // [E + 1]: expert e's row tiles start at tile_offsets[e]
    int32_t* sorted_pair = nullptr;   // [n]: the pair (r * k + j) at each sorted position
    int32_t* slot = nullptr;          // [n]: each pair's sorted position, -1 for a bad expert id
    uint16_t* act = nullptr;          // bf16 [n, I]: activations of the sorted pairs
    uint16_t* y = nullptr;            // bf16 [n, D]: expert outputs of the sorted pairs
};
size_t experts_scratch_bytes(int64_t pairs, int64_t experts, int64_t inter, int64_t dim);
ExpertsScratch carve_experts_scratch(void* base, int64_t pairs, int64_t experts, int64_t inter,
                                     int64_t dim);

struct ExpertsArgs {
    const uint16_t* x = nullptr;             // [R, D]
    const int32_t* ids = nullptr;            // [R, k]
    const float* weights = nullptr;          // [R, k]
    const uint16_t* gate_up = nullptr;       // [E, 2I, D], or null for MXFP4
    const uint16_t* gate_up_bias = nullptr;  // [E, 2I] or null
    const uint16_t* down = nullptr;          // [E, D, I], or null for MXFP4
    const uint16_t* down_bias = nullptr;     // [E, D] or null
    // MXFP4 experts instead (backend/ops.h: MoeExperts; D, I multiples of 32, 4-byte aligned).
    const uint8_t* gate_up_blocks = nullptr;  // [E, 2I, D/32, 16]
    const uint8_t* gate_up_scales = nullptr;  // [E, 2I, D/32]
    const uint8_t* down_blocks = nullptr;     // [E, D, I/32, 16]
    const uint8_t* down_scales = nullptr;     // [E, D, I/32]
    uint16_t* out = nullptr;                  // [R, D]
    int rows = 0, dim = 0, k = 0, experts = 0, inter = 0;
    int activation = kSwiglu;
    float limit = 7.0f, alpha = 1.702f;
};
// The whole op (backend/op_list.h: moe_experts): sort, gate_up GEMM + activation, down GEMM,
// weighted gather. experts <= kMaxExperts.
void experts(const ExpertsArgs& a, const ExpertsScratch& s, CUstream_st* stream);

// The sort (moe_grouped.cu): s.offsets, s.tile_offsets, s.sorted_pair and s.slot from the expert
// ids of `pairs` pairs: pairs grouped by expert, in pair order within an expert; a pair whose id
// lies outside [0, experts) gets slot -1 and no position. One block, integer counts only.
void sort_pairs(const int32_t* ids, int pairs, int experts, const ExpertsScratch& s,
                CUstream_st* stream);

// One grouped GEMM over the sorted pairs (moe_grouped.cu): for every expert e and its pairs
// s in [offsets[e], offsets[e+1]), out[s, :] = A_s · W_eᵀ (+ bias_e), fp32 accumulation.
// A_s = a[(sorted_pair[s] / k_per_row) * kdim ...] when sorted_pair is given (the tokens' x),
// else a[s * kdim ...]. Gated (activation != kNone): W_e [2N, kdim] holds N gate rows then N up
// rows, out[s, u] = act(gate_u + b, up_u + b) for u < N; otherwise W_e [N, kdim], out [n, N].
// Each output's reduction runs over kdim in one fixed order whatever the expert's row count
// (row invariance, Note [moe row invariance] in moe_grouped.cu). With w_blocks set, W is MXFP4
// (blocks [E, rows, kdim/32, 16] 4-byte aligned, scales [E, rows, kdim/32], kdim % 32 == 0) and
// w is unused: the weight tiles are decoded on their way into shared memory (Note [moe MXFP4
// tiles]), the same bf16 values, so the same bits as the GEMM on the decoded weights.
struct GroupedGemmArgs {
    const uint16_t* a = nullptr;
    const int32_t* sorted_pair = nullptr;
    int k_per_row = 1;
    const uint16_t* w = nullptr;
    const uint8_t* w_blocks = nullptr;
    const uint8_t* w_scales = nullptr;
    const uint16_t* bias = nullptr;  // [E, 2N] (gated) or [E, N], or null
    const int32_t* offsets = nullptr;
    const int32_t* tile_offsets = nullptr;
    int experts = 0;
    int pairs = 0;  // n: sizes the grid (max_row_tiles)
    int kdim = 0;
    int n = 0;
    uint16_t* out = nullptr;
    int activation = kNone;
    float limit = 7.0f, alpha = 1.702f;
};
void grouped_gemm(const GroupedGemmArgs& g, CUstream_st* stream);

}  // namespace dflash::cuda::moe

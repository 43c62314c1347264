// bf16 linear layers on AMX tiles and their portable twin (bf16_linear.h, Note [bf16 drafting]).
#include "backend/cpu/bf16_linear.h"

#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cpuid.h>
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/isa.h"
#include "core/dtype.h"
#include "core/error.h"

// GCC 12's AVX-512 shifts start from _mm512_undefined_epi32(), which -Wmaybe-uninitialized
// reports (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace dflash::cpu {
namespace {

constexpr int64_t kTileK = 32;           // k per tile: 16 pairs of bf16 (64 bytes a row)
constexpr int64_t kTileElems = 16 * 32;  // bf16 per weight tile (1 KB)
constexpr int64_t kChunkTiles = 32;      // x is converted 1024 columns at a time (32 KB a block)
constexpr int kGroup = 4;                // column blocks per pass over a chunk of x (4 C tiles)

bool cpu_has_amx_bf16() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    const bool amx_bf16 = (d >> 22) & 1, amx_tile = (d >> 24) & 1;
    if (!amx_bf16 || !amx_tile) return false;
    // AMX kernels convert x with AVX512-BF16 (leaf 7, subleaf 1, EAX bit 5).
    unsigned a1 = 0, b1 = 0, c1 = 0, d1 = 0;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1) == 0) return false;
    return ((a1 >> 5) & 1) && __builtin_cpu_supports("avx512f");
}

// AVX512-BF16 (vdpbf16ps; leaf 7, subleaf 1, EAX bit 5) with the AVX-512 it extends.
bool cpu_has_avx512_bf16() {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d) == 0) return false;
    return ((a >> 5) & 1) && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

// Linux hands out the 8 KB tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM): once per
// process, for all its threads.
bool request_amx_state() {
    constexpr int kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
}

// Rows [m0, m0 + mr) of x and columns [t0 * 32, (t0 + tiles) * 32) into a [16][tiles * 32] block
// of bf16, zero past x's rows and columns.
void convert_x_portable(const float* x, int64_t ldx, int64_t m0, int64_t mr, int64_t k, int64_t t0,
                        int64_t tiles, uint16_t* block) {
    const int64_t width = tiles * kTileK, c0 = t0 * kTileK;
    for (int64_t r = 0; r < 16; ++r) {
        uint16_t* out = block + r * width;
        const float* row = x + (m0 + r) * ldx;
        for (int64_t c = 0; c < width; ++c)
            out[c] = r < mr && c0 + c < k ? to_bf16(row[c0 + c]) : uint16_t{0};
    }
}

// The column blocks [b0, b1) of rows [m0, m0 + mr) into acc[b - b0][row][col]; tiles of the weight
// are read in order, each output one chain over k (the order of the AMX kernel).
void blocks_portable(const Bf16Weight& w, const uint16_t* xb, int64_t width, int64_t t0,
                     int64_t tiles, int64_t mr, int64_t b0, int64_t b1, float (*acc)[16][16]) {
    for (int64_t b = b0; b < b1; ++b) {
        const uint16_t* tile0 = w.data.get() + (b * w.k_tiles + t0) * kTileElems;
        for (int64_t r = 0; r < mr; ++r) {
            float* out = acc[b - b0][r];
            const uint16_t* xr = xb + r * width;
            for (int64_t t = 0; t < tiles; ++t) {
                const uint16_t* tile = tile0 + t * kTileElems;
                for (int p = 0; p < 16; ++p) {
                    const float a0 = bf16_to_f32(xr[t * kTileK + 2 * p]),
                                a1 = bf16_to_f32(xr[t * kTileK + 2 * p + 1]);
                    const uint16_t* wp = tile + p * 32;
                    for (int j = 0; j < 16; ++j) {
                        out[j] = out[j] + a0 * bf16_to_f32(wp[2 * j]);
                        out[j] = out[j] + a1 * bf16_to_f32(wp[2 * j + 1]);
                    }
                }
            }
        }
    }
}

// y's rows [m0, m0 + mr), columns of blocks [b0, b1) = acc (+ beta * y).
void store_blocks(const Bf16Weight& w, const float (*acc)[16][16], int64_t m0, int64_t mr,
                  int64_t b0, int64_t b1, float beta, float* y, int64_t ldy) {
    for (int64_t b = b0; b < b1; ++b) {
        const int64_t cols = std::min<int64_t>(16, w.n - b * 16);
        for (int64_t r = 0; r < mr; ++r) {
            float* out = y + (m0 + r) * ldy + b * 16;
            const float* a = acc[b - b0][r];
            for (int64_t j = 0; j < cols; ++j) out[j] = beta == 0.0f ? a[j] : a[j] + beta * out[j];
        }
    }
}

void run_portable(const Bf16Weight& w, int64_t m, const float* x, int64_t ldx, int64_t b0,
                  int64_t b1, float beta, float* y, int64_t ldy) {
    alignas(64) uint16_t xb[16 * kChunkTiles * kTileK];
    alignas(64) float acc[kGroup][16][16];
    for (int64_t m0 = 0; m0 < m; m0 += 16) {
        const int64_t mr = std::min<int64_t>(16, m - m0);
        for (int64_t g0 = b0; g0 < b1; g0 += kGroup) {
            const int64_t g1 = std::min<int64_t>(b1, g0 + kGroup);
            std::memset(acc, 0, sizeof acc);
            for (int64_t t0 = 0; t0 < w.k_tiles; t0 += kChunkTiles) {
                const int64_t tiles = std::min(kChunkTiles, w.k_tiles - t0);
                convert_x_portable(x, ldx, m0, mr, w.k, t0, tiles, xb);
                blocks_portable(w, xb, tiles * kTileK, t0, tiles, mr, g0, g1, acc);
            }
            store_blocks(w, acc, m0, mr, g0, g1, beta, y, ldy);
        }
    }
}

// ---- AMX -------------------------------------------------------------------------------------

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};
    uint8_t rows[16] = {};
};

// One row of x: width bf16 (a whole number of tiles) from the first `valid` floats of row, zero
// past them; AVX512-BF16's conversion (to nearest even, denormals to zero: the bits of to_bf16,
// tested).
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) void convert_row_avx512(
    const float* row, int64_t valid, int64_t width, uint16_t* out) {
    for (int64_t c = 0; c < width; c += 32) {
        const int64_t n = std::clamp<int64_t>(valid - c, 0, 32);
        const __mmask16 lo = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1),
                        hi = static_cast<__mmask16>(n >= 32   ? 0xffff
                                                    : n <= 16 ? 0
                                                              : (1u << (n - 16)) - 1);
        const __m512 a = _mm512_maskz_loadu_ps(lo, row + c),
                     b = _mm512_maskz_loadu_ps(hi, row + c + 16);
        _mm512_storeu_si512(out + c, (__m512i)_mm512_cvtne2ps_pbh(b, a));
    }
}

// As convert_x_portable, with AVX512-BF16's conversion.
void convert_x_avx512(const float* x, int64_t ldx, int64_t m0, int64_t mr, int64_t k, int64_t t0,
                      int64_t tiles, uint16_t* block) {
    const int64_t width = tiles * kTileK, c0 = t0 * kTileK;
    for (int64_t r = 0; r < 16; ++r) {
        uint16_t* out = block + r * width;
        if (r >= mr) {
            std::memset(out, 0, static_cast<size_t>(width) * 2);
            continue;
        }
        convert_row_avx512(x + (m0 + r) * ldx + c0, std::clamp<int64_t>(k - c0, 0, width), width,
                           out);
    }
}

// Tiles: 0-3 the C blocks of a group, 4 the x tile, 5 and 6 weight tiles in turn.
template <int G>
__attribute__((target("amx-tile,amx-bf16"))) void group_amx(const Bf16Weight& w, const uint16_t* xb,
                                                            int64_t width, int64_t t0,
                                                            int64_t tiles, int64_t g0) {
    const uint16_t* base = w.data.get();
    const int64_t stride_x = width * 2;
    for (int64_t t = 0; t < tiles; ++t) {
        _tile_loadd(4, xb + t * kTileK, stride_x);
        const uint16_t* tile = base + ((g0 * w.k_tiles) + t0 + t) * kTileElems;
        const int64_t next_block = w.k_tiles * kTileElems;
        _tile_loadd(5, tile, 64);
        _tile_dpbf16ps(0, 4, 5);
        if constexpr (G > 1) {
            _tile_loadd(6, tile + next_block, 64);
            _tile_dpbf16ps(1, 4, 6);
        }
        if constexpr (G > 2) {
            _tile_loadd(5, tile + 2 * next_block, 64);
            _tile_dpbf16ps(2, 4, 5);
        }
        if constexpr (G > 3) {
            _tile_loadd(6, tile + 3 * next_block, 64);
            _tile_dpbf16ps(3, 4, 6);
        }
    }
}

__attribute__((target("amx-tile,amx-bf16"))) void zero_c_tiles() {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
}

__attribute__((target("amx-tile,amx-bf16"))) void store_c_tiles(int g, float (*acc)[16][16]) {
    _tile_stored(0, acc[0], 64);
    if (g > 1) _tile_stored(1, acc[1], 64);
    if (g > 2) _tile_stored(2, acc[2], 64);
    if (g > 3) _tile_stored(3, acc[3], 64);
}

__attribute__((target("amx-tile,amx-bf16"))) void run_amx(const Bf16Weight& w, int64_t m,
                                                          const float* x, int64_t ldx, int64_t b0,
                                                          int64_t b1, float beta, float* y,
                                                          int64_t ldy) {
    TileConfig cfg;
    for (int t = 0; t < 7; ++t) {
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    _tile_loadconfig(&cfg);
    alignas(64) uint16_t xb[16 * kChunkTiles * kTileK];
    alignas(64) float acc[kGroup][16][16];
    const bool one_chunk = w.k_tiles <= kChunkTiles;
    for (int64_t m0 = 0; m0 < m; m0 += 16) {
        const int64_t mr = std::min<int64_t>(16, m - m0);
        if (one_chunk) convert_x_avx512(x, ldx, m0, mr, w.k, 0, w.k_tiles, xb);
        for (int64_t g0 = b0; g0 < b1; g0 += kGroup) {
            const int g = static_cast<int>(std::min<int64_t>(kGroup, b1 - g0));
            zero_c_tiles();
            for (int64_t t0 = 0; t0 < w.k_tiles; t0 += kChunkTiles) {
                const int64_t tiles = std::min(kChunkTiles, w.k_tiles - t0);
                if (!one_chunk) convert_x_avx512(x, ldx, m0, mr, w.k, t0, tiles, xb);
                const int64_t width = tiles * kTileK;
                switch (g) {
                    case 4:
                        group_amx<4>(w, xb, width, t0, tiles, g0);
                        break;
                    case 3:
                        group_amx<3>(w, xb, width, t0, tiles, g0);
                        break;
                    case 2:
                        group_amx<2>(w, xb, width, t0, tiles, g0);
                        break;
                    default:
                        group_amx<1>(w, xb, width, t0, tiles, g0);
                        break;
                }
            }
            store_c_tiles(g, acc);
            store_blocks(w, acc, m0, mr, g0, g0 + g, beta, y, ldy);
        }
    }
    // Released so that a context switch of this thread saves no tile state.
    _tile_release();
}

// ---- AVX512-BF16 ------------------------------------------------------------------------------
//
// Without AMX: vdpbf16ps adds the products of 16 pairs of bf16 to 16 fp32 sums in one
// instruction, twice the multiply-adds of an fp32 FMA (measured on the 2-core AMD EPYC, Zen 5: both
// run ~2 a cycle, so 200 against 106 GMAC/s a core; docs/performance.md). Each 64-byte line of a
// packed weight block is one k-pair of its 16 outputs, so the block is read in place as a stream
// of such lines: a row's pair of x is broadcast and multiplied into the 16 outputs' sums, for
// kRowsBf16 rows and kBlocksBf16 blocks at a time (the weight lines are read once for all the
// rows). Each output's sum is one chain over the k-pairs in order, whatever the rows, blocks or
// threads around it, so any split gives the same bits.

// 8 rows x 3 blocks: 24 sums, 3 weight lines and x in 32 registers; 6 x 4, 4 x 4 and 4 x 3 measured
// within the noise of the shared box, 8 x 2 slower (docs/performance.md, issue 27).
constexpr int kRowsBf16 = 8;
constexpr int kBlocksBf16 = 3;

// x's rows [0, m) into xb [m][kp] of bf16 (kp a whole number of tiles; zero past k).
void convert_rows_avx512(const float* x, int64_t ldx, int64_t m, int64_t k, int64_t kp,
                         uint16_t* xb) {
    for (int64_t r = 0; r < m; ++r) convert_row_avx512(x + r * ldx, k, kp, xb + r * kp);
}

template <int MR, int NB>
__attribute__((target("avx512f,avx512bf16,avx512bw,avx512vl"))) void tile_avx512_bf16(
    const Bf16Weight& w, const uint16_t* xb, int64_t kp, int64_t r0, int64_t b0, float beta,
    float* y, int64_t ldy) {
    const int64_t pairs = w.k_tiles * 16, block_elems = w.k_tiles * kTileElems;
    const uint16_t* wb = w.data.get() + b0 * block_elems;
    const auto* xr = reinterpret_cast<const int*>(xb + r0 * kp);  // pairs of bf16 as 32-bit words
    const int64_t xstride = kp / 2;
    __m512 acc[MR][NB];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
        __m512bh wv[NB];
#pragma GCC unroll 4
        for (int j = 0; j < NB; ++j)
            wv[j] = (__m512bh)_mm512_load_si512(wb + j * block_elems + p * 32);
            // Each block's lines 16 pairs (1 KB) on: the weight comes from L3 or memory (a verify
            // evicted it), and the 3 streams outran the hardware prefetcher (measured: -5 to -15%).
#pragma GCC unroll 4
        for (int j = 0; j < NB; ++j)
            _mm_prefetch(reinterpret_cast<const char*>(wb + j * block_elems + (p + 16) * 32),
                         _MM_HINT_T0);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m512bh xv = (__m512bh)_mm512_set1_epi32(xr[i * xstride + p]);
#pragma GCC unroll 4
            for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], xv, wv[j]);
        }
    }
    for (int j = 0; j < NB; ++j) {
        const int64_t col = (b0 + j) * 16;
        const int64_t cols = std::min<int64_t>(16, w.n - col);
        const __mmask16 mask = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1);
        for (int i = 0; i < MR; ++i) {
            float* out = y + (r0 + i) * ldy + col;
            __m512 v = acc[i][j];
            if (beta != 0.0f)
                v = _mm512_add_ps(
                    v, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, out)));
            _mm512_mask_storeu_ps(out, mask, v);
        }
    }
}

// A tile of mr <= MR rows and nb <= NB blocks.
template <int MR, int NB>
void tile_avx512_bf16_any(int mr, int nb, const Bf16Weight& w, const uint16_t* xb, int64_t kp,
                          int64_t r0, int64_t b0, float beta, float* y, int64_t ldy) {
    if constexpr (MR > 1) {
        if (mr < MR)
            return tile_avx512_bf16_any<MR - 1, NB>(mr, nb, w, xb, kp, r0, b0, beta, y, ldy);
    }
    if constexpr (NB > 1) {
        if (nb < NB)
            return tile_avx512_bf16_any<MR, NB - 1>(mr, nb, w, xb, kp, r0, b0, beta, y, ldy);
    }
    tile_avx512_bf16<MR, NB>(w, xb, kp, r0, b0, beta, y, ldy);
}

// Blocks [b0, b1) of all m rows; xb holds x in bf16 ([m][kp]). The rows run inside the blocks, so
// a group of blocks (3 x 16 outputs x k) stays in L1/L2 while every row tile reads it.
void run_avx512_bf16(const Bf16Weight& w, int64_t m, const uint16_t* xb, int64_t kp, int64_t b0,
                     int64_t b1, float beta, float* y, int64_t ldy) {
    for (int64_t g = b0; g < b1; g += kBlocksBf16) {
        const int nb = static_cast<int>(std::min<int64_t>(kBlocksBf16, b1 - g));
        for (int64_t r0 = 0; r0 < m; r0 += kRowsBf16) {
            const int mr = static_cast<int>(std::min<int64_t>(kRowsBf16, m - r0));
            tile_avx512_bf16_any<kRowsBf16, kBlocksBf16>(mr, nb, w, xb, kp, r0, g, beta, y, ldy);
        }
    }
}

// ---- AVX-512F ---------------------------------------------------------------------------------
//
// Without AMX and AVX512-BF16 (Xeons before Cooper Lake, AMD before Zen 4): the same packed lines,
// each widened to two fp32 vectors (its even and its odd k) by a shift and a mask, and fp32 FMAs.
// The arithmetic is fp32's, but without the dot kernels' lane sums, on half the bytes. A product
// of two bf16 values is exact in fp32, so an FMA rounds as the portable kernel's multiply and add
// do, in the same order: the two give the same bits (tested).

// 8 rows x 2 blocks: 16 sums, 4 widened weight vectors and x; 6 x 3, 4 x 4 and 4 x 3 measured
// within the noise (docs/performance.md, issue 27).
constexpr int kRowsF = 8;
constexpr int kBlocksF = 2;

// x's rows [0, m) into xf [m][kp]: each value rounded to bf16 as to_bf16 does (to nearest even,
// denormals to signed zero, NaN kept a quiet NaN) and widened back; zero past k.
__attribute__((target("avx512f"))) void convert_rows_f32(const float* x, int64_t ldx, int64_t m,
                                                         int64_t k, int64_t kp, float* xf) {
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000),
                  high = _mm512_set1_epi32(static_cast<int>(0xffff0000u)),
                  sign = _mm512_set1_epi32(static_cast<int>(0x80000000u)),
                  quiet = _mm512_set1_epi32(0x00400000), half = _mm512_set1_epi32(0x7fff),
                  one = _mm512_set1_epi32(1);
    for (int64_t r = 0; r < m; ++r) {
        const float* row = x + r * ldx;
        float* out = xf + r * kp;
        for (int64_t c = 0; c < kp; c += 16) {
            const int64_t n = std::clamp<int64_t>(k - c, 0, 16);
            const __mmask16 valid = static_cast<__mmask16>(n >= 16 ? 0xffff : (1u << n) - 1);
            const __m512i u = _mm512_maskz_loadu_epi32(valid, row + c);
            const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
            const __mmask16 tiny = _mm512_testn_epi32_mask(u, inf);  // zero or denormal
            const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
            __m512i v = _mm512_and_si512(_mm512_add_epi32(u, _mm512_add_epi32(half, odd)), high);
            v = _mm512_mask_mov_epi32(v, nan, _mm512_or_si512(_mm512_and_si512(u, high), quiet));
            v = _mm512_mask_mov_epi32(v, tiny, _mm512_and_si512(u, sign));
            _mm512_storeu_si512(out + c, v);
        }
    }
}

template <int MR, int NB>
__attribute__((target("avx512f"))) void tile_avx512_f32(const Bf16Weight& w, const float* xf,
                                                        int64_t kp, int64_t r0, int64_t b0,
                                                        float beta, float* y, int64_t ldy) {
    const int64_t pairs = w.k_tiles * 16, block_elems = w.k_tiles * kTileElems;
    const uint16_t* wb = w.data.get() + b0 * block_elems;
    const float* xr = xf + r0 * kp;
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
    __m512 acc[MR][NB];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int j = 0; j < NB; ++j) acc[i][j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
        __m512 even[NB], odd[NB];
#pragma GCC unroll 4
        for (int j = 0; j < NB; ++j) {
            const __m512i line = _mm512_load_si512(wb + j * block_elems + p * 32);
            even[j] = _mm512_castsi512_ps(_mm512_slli_epi32(line, 16));
            odd[j] = _mm512_castsi512_ps(_mm512_and_si512(line, high));
        }
#pragma GCC unroll 4
        for (int j = 0; j < NB; ++j)
            _mm_prefetch(reinterpret_cast<const char*>(wb + j * block_elems + (p + 16) * 32),
                         _MM_HINT_T0);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
            const __m512 x0 = _mm512_set1_ps(xr[i * kp + 2 * p]),
                         x1 = _mm512_set1_ps(xr[i * kp + 2 * p + 1]);
#pragma GCC unroll 4
            for (int j = 0; j < NB; ++j) {
                acc[i][j] = _mm512_fmadd_ps(x0, even[j], acc[i][j]);
                acc[i][j] = _mm512_fmadd_ps(x1, odd[j], acc[i][j]);
            }
        }
    }
    for (int j = 0; j < NB; ++j) {
        const int64_t col = (b0 + j) * 16;
        const int64_t cols = std::min<int64_t>(16, w.n - col);
        const __mmask16 mask = static_cast<__mmask16>(cols >= 16 ? 0xffff : (1u << cols) - 1);
        for (int i = 0; i < MR; ++i) {
            float* out = y + (r0 + i) * ldy + col;
            __m512 v = acc[i][j];
            if (beta != 0.0f)
                v = _mm512_add_ps(
                    v, _mm512_mul_ps(_mm512_set1_ps(beta), _mm512_maskz_loadu_ps(mask, out)));
            _mm512_mask_storeu_ps(out, mask, v);
        }
    }
}

template <int MR, int NB>
void tile_avx512_f32_any(int mr, int nb, const Bf16Weight& w, const float* xf, int64_t kp,
                         int64_t r0, int64_t b0, float beta, float* y, int64_t ldy) {
    if constexpr (MR > 1) {
        if (mr < MR)
            return tile_avx512_f32_any<MR - 1, NB>(mr, nb, w, xf, kp, r0, b0, beta, y, ldy);
    }
    if constexpr (NB > 1) {
        if (nb < NB)
            return tile_avx512_f32_any<MR, NB - 1>(mr, nb, w, xf, kp, r0, b0, beta, y, ldy);
    }
    tile_avx512_f32<MR, NB>(w, xf, kp, r0, b0, beta, y, ldy);
}

void run_avx512_f32(const Bf16Weight& w, int64_t m, const float* xf, int64_t kp, int64_t b0,
                    int64_t b1, float beta, float* y, int64_t ldy) {
    for (int64_t g = b0; g < b1; g += kBlocksF) {
        const int nb = static_cast<int>(std::min<int64_t>(kBlocksF, b1 - g));
        for (int64_t r0 = 0; r0 < m; r0 += kRowsF) {
            const int mr = static_cast<int>(std::min<int64_t>(kRowsF, m - r0));
            tile_avx512_f32_any<kRowsF, kBlocksF>(mr, nb, w, xf, kp, r0, g, beta, y, ldy);
        }
    }
}

}  // namespace

bool amx_bf16_available() {
    static const bool available = cpu_has_amx_bf16() && request_amx_state();  // once per process
    return available;
}

bool avx512_bf16_available() {
    static const bool available = cpu_has_avx512_bf16();  // a fact about the machine
    return available;
}

Bf16Kernel best_bf16_kernel() {
    if (amx_bf16_available()) return Bf16Kernel::amx;
    if (avx512_bf16_available()) return Bf16Kernel::avx512_bf16;
    return Bf16Kernel::portable;
}

bool bf16_kernel_available(Bf16Kernel kernel) {
    switch (kernel) {
        case Bf16Kernel::amx:
            return amx_bf16_available();
        case Bf16Kernel::avx512_bf16:
            return avx512_bf16_available();
        case Bf16Kernel::avx512:
            return detected_isa() == CpuIsa::avx512;
        case Bf16Kernel::portable:
            break;
    }
    return true;
}

const char* bf16_kernel_name(Bf16Kernel kernel) {
    switch (kernel) {
        case Bf16Kernel::amx:
            return "amx";
        case Bf16Kernel::avx512_bf16:
            return "avx512_bf16";
        case Bf16Kernel::avx512:
            return "avx512";
        case Bf16Kernel::portable:
            break;
    }
    return "portable";
}

uint16_t to_bf16(float f) {
    uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) == 0) return static_cast<uint16_t>((u >> 16) & 0x8000u);  // 0, denormal
    return f32_to_bf16(f);
}

Bf16Weight pack_bf16_weight(const Exec& ex, const float* w, int64_t n, int64_t k) {
    DF_CHECK(n >= 0 && k >= 0, "pack_bf16_weight: a weight of [{}, {}]", n, k);
    Bf16Weight out;
    out.n = n;
    out.k = k;
    out.k_tiles = (k + kTileK - 1) / kTileK;
    out.source = w;
    const int64_t blocks = out.blocks();
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, blocks * out.k_tiles)) *
                         kTileElems * sizeof(uint16_t);
    out.data.reset(static_cast<uint16_t*>(std::aligned_alloc(64, bytes)));
    DF_CHECK(out.data != nullptr, "out of host memory packing a [{}, {}] weight in bf16 ({} bytes)",
             n, k, bytes);
    uint16_t* dst = out.data.get();
    parallel_for(
        ex, blocks, static_cast<double>(n) * k >= kParallelFlops, [&](int64_t b0, int64_t b1) {
            for (int64_t b = b0; b < b1; ++b)
                for (int64_t t = 0; t < out.k_tiles; ++t) {
                    uint16_t* tile = dst + (b * out.k_tiles + t) * kTileElems;
                    for (int64_t p = 0; p < 16; ++p)
                        for (int64_t j = 0; j < 16; ++j)
                            for (int64_t e = 0; e < 2; ++e) {
                                const int64_t row = b * 16 + j, col = t * kTileK + 2 * p + e;
                                tile[p * 32 + 2 * j + e] =
                                    row < n && col < k ? to_bf16(w[row * k + col]) : uint16_t{0};
                            }
                }
        });
    return out;
}

void linear_bf16_with(Bf16Kernel kernel, const Exec& ex, int64_t m, const float* x, int64_t ldx,
                      const Bf16Weight& w, float beta, float* y, int64_t ldy) {
    DF_CHECK(bf16_kernel_available(kernel), "linear_bf16: the {} kernel does not run on this CPU",
             bf16_kernel_name(kernel));
    DF_CHECK(w.data != nullptr || w.n == 0, "linear_bf16: an empty packed weight");
    if (m == 0 || w.n == 0) return;
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(w.n) * w.k;
    const int64_t blocks = w.blocks();
    if (kernel == Bf16Kernel::avx512) {
        // x rounded to bf16 and widened, once for all threads: [m][whole tiles of k].
        const int64_t kp = w.k_tiles * kTileK;
        std::vector<float> xf(static_cast<size_t>(m * kp));
        convert_rows_f32(x, ldx, m, w.k, kp, xf.data());
        const int64_t groups = (blocks + kBlocksF - 1) / kBlocksF;
        parallel_for(ex, groups, flops >= kParallelFlops, [&](int64_t q0, int64_t q1) {
            run_avx512_f32(w, m, xf.data(), kp, q0 * kBlocksF, std::min(blocks, q1 * kBlocksF),
                           beta, y, ldy);
        });
        return;
    }
    if (kernel == Bf16Kernel::avx512_bf16) {
        // x in bf16 once for all threads: [m][whole tiles of k], zero past k.
        const int64_t kp = w.k_tiles * kTileK;
        std::vector<uint16_t> xb(static_cast<size_t>(m * kp));
        convert_rows_avx512(x, ldx, m, w.k, kp, xb.data());
        const int64_t groups = (blocks + kBlocksBf16 - 1) / kBlocksBf16;
        parallel_for(ex, groups, flops >= kParallelFlops, [&](int64_t q0, int64_t q1) {
            run_avx512_bf16(w, m, xb.data(), kp, q0 * kBlocksBf16,
                            std::min(blocks, q1 * kBlocksBf16), beta, y, ldy);
        });
        return;
    }
    const int64_t groups = (blocks + kGroup - 1) / kGroup;
    parallel_for(ex, groups, flops >= kParallelFlops, [&](int64_t q0, int64_t q1) {
        const int64_t b0 = q0 * kGroup, b1 = std::min(blocks, q1 * kGroup);
        if (kernel == Bf16Kernel::amx)
            run_amx(w, m, x, ldx, b0, b1, beta, y, ldy);
        else
            run_portable(w, m, x, ldx, b0, b1, beta, y, ldy);
    });
}

void linear_bf16(const Exec& ex, int64_t m, const float* x, int64_t ldx, const Bf16Weight& w,
                 float beta, float* y, int64_t ldy) {
    linear_bf16_with(best_bf16_kernel(), ex, m, x, ldx, w, beta, y, ldy);
}

}  // namespace dflash::cpu

#pragma GCC diagnostic pop

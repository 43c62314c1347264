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
// the 32-wide k chunks c = warp, warp + 8, ... Lane (g, t) loads 16 bytes of weight row
// col0 + 8j + g at k = 32c + 8t for each n-tile j, and the 16 bytes of x rows g and g + 8 at the
// same k (zero for rows >= R, which are never read). The reduction over k may be permuted as long
// as x and W are permuted alike: the lane's 8 values feed two m16n8k16 products whose k slots
// 2t, 2t+1, 2t+8, 2t+9 hold its values 0-3, then 4-7, so a 16-byte load is a whole fragment and
// no shared memory is needed on the way in. The warps' partial sums meet in shared memory and are
// added in warp order.
//
// Note [rows_linear row invariance]: every output is the fp32 sum of the same products in the
// same order: per warp its chunks in ascending order, two products each, then the warps 0..7 in
// order. That order depends on k alone, not on the rows, the columns a block covers or the other
// rows of the fragment (the tensor cores keep rows apart), so a decode row and the same row in a
// verify block have the same bits.
#include "backend/cuda/kernels/attention_mma.cuh"
#include "backend/cuda/kernels/rows_linear.h"

namespace dflash::cuda::rows {
namespace {

using attn::mma16816;

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kChunkK = 32;  // k per warp step: 4 lanes x 8 values
constexpr int kGroup = 2;    // chunks whose loads are issued before their products
constexpr int kMaxRows = 16;
constexpr int kMinBlocks = 264;  // two a SM on an H200's 132

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

__device__ __forceinline__ uint4 load16(const uint16_t* p, bool valid) {
    uint4 v;
    if (valid) {
        v = __ldg(reinterpret_cast<const uint4*>(p));
    } else {
        v.x = v.y = v.z = v.w = 0u;
    }
    return v;
}

__device__ __forceinline__ float silu_times(float g, float u) {
    return g / (1.0f + expf(-g)) * u;
}

// NT n-tiles of 8 columns; kPair: also the same columns of w[1] (SwiGLU's up).
template <int NT, bool kPair>
__global__ void __launch_bounds__(kThreads) rows_kernel(const RowsArgs a) {
    DF_ATTN_SHARED(smem);
    constexpr int kCols = 8 * NT;
    constexpr int kMats = kPair ? 2 : 1;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int col0 = static_cast<int>(blockIdx.x) * kCols;
    // The segment this tile falls in (tiles never straddle two: rows_tile_cols).
    int seg = 0, base = col0;
    while (seg + 1 < a.nseg && base >= a.n[seg]) base -= a.n[seg++];
    const int nrows = a.n[seg];
    const uint16_t* wm[2] = {a.w[seg], kPair ? a.w[1] : nullptr};

    float acc[kMats][NT][4];
    DF_ATTN_UNROLL
    for (int m = 0; m < kMats; ++m) {
        DF_ATTN_UNROLL
        for (int j = 0; j < NT; ++j) {
            DF_ATTN_UNROLL
            for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.0f;
        }
    }
    const int nchunks = (a.k + kChunkK - 1) / kChunkK;
    const bool lo_ok = g < a.rows, hi_ok = g + 8 < a.rows;
    const uint16_t* x_lo = a.x + static_cast<size_t>(lo_ok ? g : 0) * a.k;
    const uint16_t* x_hi = a.x + static_cast<size_t>(hi_ok ? g + 8 : 0) * a.k;
    for (int c0 = warp; c0 < nchunks; c0 += kWarps * kGroup) {
        uint4 xa[kGroup], xb[kGroup], wv[kGroup][kMats][NT];
        DF_ATTN_UNROLL
        for (int q = 0; q < kGroup; ++q) {
            const int k = (c0 + q * kWarps) * kChunkK + 8 * t;
            const bool kv = k < a.k;  // k is a multiple of 8: a lane's 8 values are all in or out
            xa[q] = load16(x_lo + k, kv && lo_ok);
            xb[q] = load16(x_hi + k, kv && hi_ok);
            DF_ATTN_UNROLL
            for (int m = 0; m < kMats; ++m) {
                DF_ATTN_UNROLL
                for (int j = 0; j < NT; ++j) {
                    const int n = base + 8 * j + g;
                    const bool ok = kv && n < nrows;
                    wv[q][m][j] = load16(wm[m] + static_cast<size_t>(ok ? n : 0) * a.k + k, ok);
                }
            }
        }
        DF_ATTN_UNROLL
        for (int q = 0; q < kGroup; ++q) {
            const uint32_t a0[4] = {xa[q].x, xb[q].x, xa[q].y, xb[q].y};
            const uint32_t a1[4] = {xa[q].z, xb[q].z, xa[q].w, xb[q].w};
            DF_ATTN_UNROLL
            for (int m = 0; m < kMats; ++m) {
                DF_ATTN_UNROLL
                for (int j = 0; j < NT; ++j) {
                    mma16816(acc[m][j], a0, wv[q][m][j].x, wv[q][m][j].y);
                    mma16816(acc[m][j], a1, wv[q][m][j].z, wv[q][m][j].w);
                }
            }
        }
    }

    // Partial sums to shared memory: red[m][warp][row][col].
    float* red = reinterpret_cast<float*>(smem);
    DF_ATTN_UNROLL
    for (int m = 0; m < kMats; ++m) {
        DF_ATTN_UNROLL
        for (int j = 0; j < NT; ++j) {
            DF_ATTN_UNROLL
            for (int e = 0; e < 4; ++e) {
                const int row = g + 8 * (e >> 1), col = 8 * j + 2 * t + (e & 1);
                red[((m * kWarps + warp) * kMaxRows + row) * kCols + col] = acc[m][j][e];
            }
        }
    }
    __syncthreads();
    const int cols = a.epilogue == kStore ? a.n[0] + a.n[1] + a.n[2] : a.n[0];
    for (int i = tid; i < a.rows * kCols; i += kThreads) {
        const int row = i / kCols, col = i % kCols, yc = col0 + col;
        if (base + col >= nrows) continue;
        float s[kMats];
        DF_ATTN_UNROLL
        for (int m = 0; m < kMats; ++m) {
            s[m] = 0.0f;
            for (int w = 0; w < kWarps; ++w) s[m] += red[((m * kWarps + w) * kMaxRows + row) * kCols + col];
        }
        const size_t at = static_cast<size_t>(row) * cols + yc;
        if (a.y_f32) {
            static_cast<float*>(a.y)[at] = s[0];
            continue;
        }
        float v = s[0];
        if (a.epilogue == kAdd) {
            v = bf16_to_float(a.residual[at]) + s[0];
        } else if (kPair) {
            v = silu_times(bf16_to_float(float_to_bf16(s[0])),
                           bf16_to_float(float_to_bf16(s[kMats - 1])));
        }
        static_cast<uint16_t*>(a.y)[at] = float_to_bf16(v);
    }
}

template <int NT, bool kPair>
void launch(const RowsArgs& a, int cols, CUstream_st* stream) {
    const int smem = (kPair ? 2 : 1) * kWarps * kMaxRows * 8 * NT * 4;
    const unsigned blocks = static_cast<unsigned>((cols + 8 * NT - 1) / (8 * NT));
    constexpr auto kernel = rows_kernel<NT, kPair>;  // (a template's comma would split the macro)
    DF_ATTN_LAUNCH(kernel, dim3(blocks), dim3(kThreads), smem, stream, a);
}

}  // namespace

int rows_tile_cols(const RowsArgs& a) {
    const bool pair = a.epilogue == kSwiglu;
    const int total = a.epilogue == kStore ? a.n[0] + a.n[1] + a.n[2] : a.n[0];
    for (int cols = pair ? 16 : 32; cols > 8; cols /= 2) {
        bool fits = (total + cols - 1) / cols >= kMinBlocks;
        for (int i = 0; i + 1 < a.nseg; ++i) fits = fits && a.n[i] % cols == 0;
        if (fits) return cols;
    }
    return 8;
}

void rows_linear(const RowsArgs& a, CUstream_st* stream) {
    if (a.rows <= 0) return;
    const int cols = a.epilogue == kStore ? a.n[0] + a.n[1] + a.n[2] : a.n[0];
    const int tile = rows_tile_cols(a);
    if (a.epilogue == kSwiglu) {
        if (tile == 16) {
            launch<2, true>(a, cols, stream);
        } else {
            launch<1, true>(a, cols, stream);
        }
        return;
    }
    if (tile == 32) {
        launch<4, false>(a, cols, stream);
    } else if (tile == 16) {
        launch<2, false>(a, cols, stream);
    } else {
        launch<1, false>(a, cols, stream);
    }
}

}  // namespace dflash::cuda::rows

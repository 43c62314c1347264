// Attention forward kernels: FlashAttention-2 over (query tile, head) blocks, the split-KV decode
// kernel with its combine, and the dflash pre-pass that turns anchors into per-query-tile key
// ranges. bf16 mma.sync m16n8k16, fp32 accumulation, online softmax in log2 units.
// Tested by tests/cuda/attention_cuda_test.cpp (tile arithmetic:
// tests/ops/attention_tiles_test.cpp).
//
// Blocks are 4 warps of 16 query rows (kBlockM = 64) against key tiles of kBlockN = 64 rows,
// double-buffered with cp.async: tile t + 1 loads while tile t is computed; or, for head dims 64
// and 128, wide blocks of 128 query rows (4 warps of 32 rows, or 8 of 16; FwdTile in attention.h,
// Note [Wide forward tiles] in attention_tiles.h). The decode kernel
// packs the queries and the GQA heads of one kv head into its rows, so each K/V tile is read once
// for all of them, and splits the cache across blocks (Note in attention_tiles.h).
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/attention_mma.cuh"
#include "backend/cuda/kernels/pdl.cuh"

namespace dflash::cuda::attn {
namespace {

// Q [64 x D], K[2] and V[2] [64 x D].
template <int D>
constexpr int fwd_smem_bytes() {
    return tile_bytes<D>(kBlockM) + 4 * tile_bytes<D>(kBlockN);
}

__global__ void dflash_plan_kernel(const MaskArgs m, QTileKeys* table) {
    const int qt = blockIdx.x * blockDim.x + threadIdx.x;
    if (qt >= num_query_tiles(m.sq)) return;
    const MaskGeom g =
        resolve_mask(m.kind, m.sq, m.sk, 0, m.ctx_len, m.block, false, 0, m.window, m.causal_block);
    table[qt] = qtile_keys(g, qt, m.anchors, m.ctx_start);
}

// Loads key tile kt's K and V rows [lo, hi) of kv head hk (zero elsewhere) into buffers.
template <int D>
__device__ __forceinline__ void load_kv_tile(const FwdArgs& a, int hk, const KeyTile& kt,
                                             uint32_t k_tile, uint32_t v_tile, int tid,
                                             int nthreads) {
    const size_t stride = static_cast<size_t>(a.hkv) * D;
    const uint16_t* k = a.k + static_cast<size_t>(hk) * D;
    const uint16_t* v = a.v + static_cast<size_t>(hk) * D;
    load_tile<D>(
        k_tile, kBlockN, tid, nthreads,
        [&](int r) -> const uint16_t* {
            const int j = kt.k0 + r;
            return j >= kt.lo && j < kt.hi ? k + static_cast<size_t>(j) * stride : nullptr;
        },
        a.k);
    load_tile<D>(
        v_tile, kBlockN, tid, nthreads,
        [&](int r) -> const uint16_t* {
            const int j = kt.k0 + r;
            return j >= kt.lo && j < kt.hi ? v + static_cast<size_t>(j) * stride : nullptr;
        },
        a.v);
}

template <int D>
__global__ void __launch_bounds__(kThreads) fwd_kernel(const FwdArgs a, float scale_log2) {
    DF_ATTN_SHARED(smem);
    // Causal: the last query tiles have the most key tiles; start them first.
    const int qt = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, hk = h / (a.h / a.hkv);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const MaskGeom g = resolve_dev(a.mask);
    const QTileKeys qk = qtile_dev(a.mask, g, qt);
    const int base1 = seg1_base(g);
    const int ntiles = num_key_tiles(qk, base1);
    const int i0 = qt * kBlockM;
    const uint32_t s_q = smem_u32(smem);
    const uint32_t s_k = s_q + tile_bytes<D>(kBlockM);
    const uint32_t s_v = s_k + 2 * tile_bytes<D>(kBlockN);
    const size_t q_stride = static_cast<size_t>(a.h) * D;
    const uint16_t* q = a.q + static_cast<size_t>(h) * D;

    load_tile<D>(
        s_q, kBlockM, tid, kThreads,
        [&](int r) -> const uint16_t* {
            return i0 + r < g.sq ? q + static_cast<size_t>(i0 + r) * q_stride : nullptr;
        },
        a.q);
    if (ntiles > 0) load_kv_tile<D>(a, hk, key_tile(qk, base1, 0), s_k, s_v, tid, kThreads);
    cp_async_commit();

    const int row = warp * 16 + (lane >> 2);  // this thread's rows: row, row + 8 (of the tile)
    const RowSpan span[2] = {row_span(g, i0 + row, a.mask.anchors, a.mask.ctx_start),
                             row_span(g, i0 + row + 8, a.mask.anchors, a.mask.ctx_start)};
    SoftmaxState<D> st;
    st.init();
    uint32_t qf[D / 16][4];
    for (int t = 0; t < ntiles; ++t) {
        const int buf = t & 1;
        if (t + 1 < ntiles) {
            load_kv_tile<D>(a, hk, key_tile(qk, base1, t + 1),
                            s_k + (buf ^ 1) * tile_bytes<D>(kBlockN),
                            s_v + (buf ^ 1) * tile_bytes<D>(kBlockN), tid, kThreads);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (t == 0) {
            DF_ATTN_UNROLL
            for (int ks = 0; ks < D / 16; ++ks) lds_a<D>(qf[ks], s_q, warp * 16, ks, lane);
        }
        attend_tile<D>(st, qf, s_k + buf * tile_bytes<D>(kBlockN),
                       s_v + buf * tile_bytes<D>(kBlockN), key_tile(qk, base1, t), span, scale_log2,
                       lane);
        __syncthreads();
    }
    cp_async_wait<0>();
    __syncthreads();

    // Normalise; a row that saw no key gets 0 and lse -inf (lse = the sink with a sink). The
    // sink joins the denominator here, once: rescaled to the max over {the row's scores, sink}.
    const float sink = sink_log2(a.mask, h);
    float m[2], l[2], inv[2];
    DF_ATTN_UNROLL
    for (int r = 0; r < 2; ++r) {
        m[r] = st.m[r];
        l[r] = quad_sum(st.l[r]);
        float keep = 1.0f;  // the factor that rescales acc and l to the final max
        if (sink > -INFINITY) {
            m[r] = fmaxf(st.m[r], sink);
            keep = exp2_approx(st.m[r] - m[r]);  // 0 when the row saw no key
            l[r] = l[r] * keep + exp2_approx(sink - m[r]);
        }
        inv[r] = l[r] > 0.0f ? keep / l[r] : 0.0f;
    }
    uint16_t* out = a.out + static_cast<size_t>(h) * D;
    const int w0 = i0 + warp * 16;
    store_rows_bf16<D>(st.acc, inv, smem, warp * 16, lane, [&](int r) -> uint16_t* {
        return w0 + r < g.sq ? out + static_cast<size_t>(w0 + r) * q_stride : nullptr;
    });
    if (a.lse != nullptr && (lane & 3) == 0) {
        DF_ATTN_UNROLL
        for (int r = 0; r < 2; ++r) {
            const int i = i0 + row + 8 * r;
            if (i < g.sq) {
                a.lse[static_cast<size_t>(h) * g.sq + i] =
                    l[r] > 0.0f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
            }
        }
    }
}

// ---- the wide forward: 128 query rows a block (Note [Wide forward tiles]) ---------------------
// MI row groups of 16 per warp, NW warps: (2, 4) or (1, 8). With MI = 2 each K and V fragment a
// warp reads by ldmatrix feeds two mma (the 16-row kernel's ldmatrix traffic per product is its
// limit); the Q fragments then no longer fit the registers beside a 32-row fp32 output (D 128) and
// are re-read from shared memory at each key tile.
template <int D, int MI, int NW>
struct Wide {
    static constexpr int kThreads = NW * 32;
    static constexpr int kRows = NW * 16 * MI;
    static constexpr bool kKeepQ = MI == 1 || D <= 64;
    static_assert(kRows == kWideBlockM, "a wide block is two query tiles");
    // Q [128 x D], K[2] and V[2] [64 x D], each row's RowSpan, the block's QTileKeys, the softmax
    // state (WideState). The spans, key ranges and softmax state are read once a tile: shared
    // memory rather than registers, which the products' fragments need (MI = 2, D = 128 spilled
    // with them in registers).
    static constexpr int kSpanOffset = tile_bytes<D>(kRows) + 4 * tile_bytes<D>(kBlockN);
    static constexpr int kKeysOffset = kSpanOffset + kRows * static_cast<int>(sizeof(RowSpan));
    static constexpr int kStatsOffset = kKeysOffset + 32;
    static_assert(sizeof(QTileKeys) <= 32);
    static constexpr int kSmemBytes = kStatsOffset + 4 * MI * kThreads * 4;
};

// Key tile kt's K and V rows [lo, hi) of kv head hk (zero elsewhere), as load_kv_tile with NT
// threads known at compile time: a thread keeps one 16-byte column and steps NT / (D / 8) rows,
// so its shared-memory offsets are one register plus constants and its sources one pointer plus
// multiples of the stride (the generic loop divides its index and swizzles at every copy).
template <int D, int NT>
__device__ __forceinline__ void wide_load_kv(const FwdArgs& a, int hk, const KeyTile& kt,
                                             uint32_t k_tile, uint32_t v_tile, int tid) {
    constexpr int kChunks = D / 8, kStep = NT / kChunks;
    static_assert(NT % kChunks == 0 && kBlockN % kStep == 0);
    const size_t stride = static_cast<size_t>(a.hkv) * D;
    const int c = tid % kChunks, r0 = tid / kChunks;
    const size_t off = static_cast<size_t>(hk) * D + c * 8;
    DF_ATTN_UNROLL
    for (int i = 0; i < kBlockN / kStep; ++i) {
        const int r = r0 + i * kStep, j = kt.k0 + r;
        const bool ok = j >= kt.lo && j < kt.hi;
        const size_t src = ok ? static_cast<size_t>(j) * stride + off : 0;
        cp_async16(k_tile + swz<D>(r, c), a.k + src, ok);
        cp_async16(v_tile + swz<D>(r, c), a.v + src, ok);
    }
}

// Query tiles 2w and 2w + 1 merged (the dflash table holds kBlockM tiles).
__device__ __forceinline__ QTileKeys wide_qtile_dev(const MaskArgs& m, const MaskGeom& g, int w) {
    const QTileKeys a = qtile_dev(m, g, 2 * w);
    const QTileKeys b =
        2 * w + 1 < num_query_tiles(g.sq) ? qtile_dev(m, g, 2 * w + 1) : QTileKeys{};
    return merge_qtile_keys(a, b);
}

constexpr float kRescaleSlack = 8.0f;  // log2 units (wide_attend)

// The running max (log2 units of scaled scores) and this thread's share of the running sum of
// rows g, g + 8 of each row group live in shared memory (stride NT, one column a thread).
template <int D, int MI, int NT>
struct WideState {
    float* ml;
    float acc[MI][D / 8][4];
    __device__ __forceinline__ float& m(int mi, int r) { return ml[(2 * mi + r) * NT]; }
    __device__ __forceinline__ float& l(int mi, int r) { return ml[(2 * (MI + mi) + r) * NT]; }
};

// Row span s cut to the keys [lo, hi) a tile loaded: [b0, e0) ∪ [b1, e1), possibly empty.
__device__ __forceinline__ RowSpan clip_span(RowSpan s, int lo, int hi) {
    s.b0 = imax(s.b0, lo);
    s.e0 = imin(s.e0, hi);
    s.b1 = imax(s.b1, lo);
    s.e1 = imin(s.e1, hi);
    return s;
}

// One key tile for a warp's 16 MI rows (first row wr0 of the block's tile). On a masked tile a
// warp none of whose rows sees a key of it skips it: its state would not change. Scores stay
// unscaled until the exponent: p = 2^(s * scale - m) is one FFMA and an ex2 per score.
template <int D, int MI, int NT, bool kKeepQ>
__device__ __forceinline__ void wide_attend(
    WideState<D, MI, NT>& st, const uint32_t (&qf)[kKeepQ ? MI : 1][kKeepQ ? D / 16 : 1][4],
    uint32_t q_tile, uint32_t k_tile, uint32_t v_tile, const KeyTile& kt, const RowSpan* spans,
    int wr0, float scale_log2, int lane) {
    const int g = lane >> 2, t = lane & 3;
    // Spans are read from shared memory where needed, not held across the products (registers).
    auto span_of = [&](int mi, int r) {
        return clip_span(spans[wr0 + mi * 16 + g + 8 * r], kt.lo, kt.hi);
    };
    if (kt.mask) {
        bool sees = false;
        DF_ATTN_UNROLL
        for (int mi = 0; mi < MI; ++mi) {
            DF_ATTN_UNROLL
            for (int r = 0; r < 2; ++r) {
                const RowSpan sp = span_of(mi, r);
                sees = sees || sp.b0 < sp.e0 || sp.b1 < sp.e1;
            }
        }
        if (!__any_sync(0xffffffffu, sees)) return;
    }
    float s[MI][kBlockN / 8][4];
    DF_ATTN_UNROLL
    for (int mi = 0; mi < MI; ++mi) {
        DF_ATTN_UNROLL
        for (int n = 0; n < kBlockN / 8; ++n) {
            DF_ATTN_UNROLL
            for (int e = 0; e < 4; ++e) s[mi][n][e] = 0.0f;
        }
    }
    // S = Q Kᵀ: each K fragment feeds the MI row groups.
    DF_ATTN_UNROLL
    for (int ks = 0; ks < D / 16; ++ks) {
        uint32_t a[MI][4];
        DF_ATTN_UNROLL
        for (int mi = 0; mi < MI; ++mi) {
            if constexpr (kKeepQ) {
                DF_ATTN_UNROLL
                for (int e = 0; e < 4; ++e) a[mi][e] = qf[mi][ks][e];
            } else {
                lds_a<D>(a[mi], q_tile, wr0 + mi * 16, ks, lane);
            }
        }
        DF_ATTN_UNROLL
        for (int np = 0; np < kBlockN / 16; ++np) {
            uint32_t b[4];
            const int row = np * 16 + (lane & 7) + ((lane >> 4) << 3);
            ldsm_x4(b, k_tile + swz<D>(row, ks * 2 + ((lane >> 3) & 1)));
            DF_ATTN_UNROLL
            for (int mi = 0; mi < MI; ++mi) {
                mma16816(s[mi][2 * np], a[mi], b[0], b[1]);
                mma16816(s[mi][2 * np + 1], a[mi], b[2], b[3]);
            }
        }
    }
    DF_ATTN_UNROLL
    for (int mi = 0; mi < MI; ++mi) {
        if (kt.mask) {
            DF_ATTN_UNROLL
            for (int r = 0; r < 2; ++r) {
                const RowSpan rs = span_of(mi, r);
                DF_ATTN_UNROLL
                for (int n = 0; n < kBlockN / 8; ++n) {
                    DF_ATTN_UNROLL
                    for (int e = 0; e < 2; ++e) {
                        const int j = kt.k0 + n * 8 + 2 * t + e;
                        if (!((j >= rs.b0 && j < rs.e0) || (j >= rs.b1 && j < rs.e1)))
                            s[mi][n][2 * r + e] = -INFINITY;
                    }
                }
            }
        }
        float mx[2] = {-INFINITY, -INFINITY};
        DF_ATTN_UNROLL
        for (int n = 0; n < kBlockN / 8; ++n) {
            DF_ATTN_UNROLL
            for (int e = 0; e < 4; ++e) mx[e >> 1] = fmaxf(mx[e >> 1], s[mi][n][e]);
        }
        // Lazy rescaling: the max a row's exponents use moves only when a tile's scores pass it
        // by more than kRescaleSlack, so p = 2^(s - m) <= 2^kRescaleSlack (far inside fp32 and
        // bf16) and most tiles skip rescaling the output. When any row of the warp must move, all
        // of them take their exact max (one warp-uniform branch). lse and the output use the max
        // in use, whatever it is, so the results are the same math.
        float m_tile[2];
        bool grow = false;
        DF_ATTN_UNROLL
        for (int r = 0; r < 2; ++r) {
            // scale_log2 > 0, so the max of the scaled scores is the scaled max. A row that has
            // seen nothing yet (max -inf) grows at its first visible score.
            m_tile[r] = quad_max(mx[r]) * scale_log2;
            grow = grow || m_tile[r] > st.m(mi, r) + kRescaleSlack;
        }
        if (__any_sync(0xffffffffu, grow)) {
            DF_ATTN_UNROLL
            for (int r = 0; r < 2; ++r) {
                const float m_old = st.m(mi, r);
                const float m_new = fmaxf(m_old, m_tile[r]);
                const float corr = exp2_approx(m_old - (m_new == -INFINITY ? 0.0f : m_new));
                st.m(mi, r) = m_new;
                st.l(mi, r) *= corr;
                DF_ATTN_UNROLL
                for (int n = 0; n < D / 8; ++n) {
                    st.acc[mi][n][2 * r] *= corr;
                    st.acc[mi][n][2 * r + 1] *= corr;
                }
            }
        }
        float neg_m[2];  // -(the max in use), the exponent's offset; 0 for a row that saw nothing
        DF_ATTN_UNROLL
        for (int r = 0; r < 2; ++r) neg_m[r] = st.m(mi, r) == -INFINITY ? 0.0f : -st.m(mi, r);
        DF_ATTN_UNROLL
        for (int n = 0; n < kBlockN / 8; ++n) {
            DF_ATTN_UNROLL
            for (int e = 0; e < 4; ++e) {
                const float p = exp2_approx(fmaf(s[mi][n][e], scale_log2, neg_m[e >> 1]));
                s[mi][n][e] = p;
                st.l(mi, e >> 1) += p;
            }
        }
    }
    // O += P V: each V fragment feeds the MI row groups.
    DF_ATTN_UNROLL
    for (int ks = 0; ks < kBlockN / 16; ++ks) {
        uint32_t a[MI][4];
        DF_ATTN_UNROLL
        for (int mi = 0; mi < MI; ++mi) acc_to_a<kBlockN / 8>(a[mi], s[mi], ks);
        DF_ATTN_UNROLL
        for (int np = 0; np < D / 16; ++np) {
            uint32_t b[4];
            const int row = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
            ldsm_x4_t(b, v_tile + swz<D>(row, np * 2 + (lane >> 4)));
            DF_ATTN_UNROLL
            for (int mi = 0; mi < MI; ++mi) {
                mma16816(st.acc[mi][2 * np], a[mi], b[0], b[1]);
                mma16816(st.acc[mi][2 * np + 1], a[mi], b[2], b[3]);
            }
        }
    }
}

template <int D, int MI, int NW>
__global__ void __launch_bounds__(Wide<D, MI, NW>::kThreads, NW == 4 ? 2 : 1)
    fwd_wide_kernel(const FwdArgs a, float scale_log2) {
    using W = Wide<D, MI, NW>;
    DF_ATTN_SHARED(smem);
    // Causal: the last query tiles have the most key tiles; those of every head start first (the
    // grid is heads x tiles, heads fastest), so the last wave holds the shortest blocks.
    const int qt = gridDim.y - 1 - blockIdx.y, h = blockIdx.x, hk = h / (a.h / a.hkv);
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const MaskGeom g = resolve_dev(a.mask);
    const QTileKeys qk = wide_qtile_dev(a.mask, g, qt);
    const int base1 = seg1_base(g);
    const int ntiles = num_key_tiles(qk, base1);
    const int i0 = qt * W::kRows;
    const uint32_t s_q = smem_u32(smem);
    const uint32_t s_k = s_q + tile_bytes<D>(W::kRows);
    const uint32_t s_v = s_k + 2 * tile_bytes<D>(kBlockN);
    auto* spans = reinterpret_cast<RowSpan*>(smem + W::kSpanOffset);
    const size_t q_stride = static_cast<size_t>(a.h) * D;
    const uint16_t* q = a.q + static_cast<size_t>(h) * D;

    load_tile<D>(
        s_q, W::kRows, tid, W::kThreads,
        [&](int r) -> const uint16_t* {
            return i0 + r < g.sq ? q + static_cast<size_t>(i0 + r) * q_stride : nullptr;
        },
        a.q);
    if (ntiles > 0) wide_load_kv<D, W::kThreads>(a, hk, key_tile(qk, base1, 0), s_k, s_v, tid);
    cp_async_commit();
    // Each row's span, for the masked tiles (read after the loop's first barrier).
    for (int r = tid; r < W::kRows; r += W::kThreads) {
        spans[r] = row_span(g, i0 + r, a.mask.anchors, a.mask.ctx_start);
    }
    auto* s_qk = reinterpret_cast<QTileKeys*>(smem + W::kKeysOffset);
    if (tid == 0) *s_qk = qk;

    const int wr0 = warp * 16 * MI;  // this warp's first row of the tile
    WideState<D, MI, W::kThreads> st;
    st.ml = reinterpret_cast<float*>(smem + W::kStatsOffset) + tid;
    DF_ATTN_UNROLL
    for (int mi = 0; mi < MI; ++mi) {
        DF_ATTN_UNROLL
        for (int r = 0; r < 2; ++r) {
            st.m(mi, r) = -INFINITY;
            st.l(mi, r) = 0.0f;
        }
        DF_ATTN_UNROLL
        for (int n = 0; n < D / 8; ++n) {
            DF_ATTN_UNROLL
            for (int e = 0; e < 4; ++e) st.acc[mi][n][e] = 0.0f;
        }
    }
    uint32_t qf[W::kKeepQ ? MI : 1][W::kKeepQ ? D / 16 : 1][4];
    // One barrier a tile: once tile t has landed and every warp is past tile t - 1, tile t + 1
    // loads into the buffer t - 1 used, while tile t is computed.
    for (int t = 0; t < ntiles; ++t) {
        const int buf = t & 1;
        cp_async_wait<0>();
        __syncthreads();
        const QTileKeys qk_t = *s_qk;
        if (t + 1 < ntiles) {
            wide_load_kv<D, W::kThreads>(a, hk, key_tile(qk_t, base1, t + 1),
                                         s_k + (buf ^ 1) * tile_bytes<D>(kBlockN),
                                         s_v + (buf ^ 1) * tile_bytes<D>(kBlockN), tid);
            cp_async_commit();
        }
        if constexpr (W::kKeepQ) {
            if (t == 0) {
                DF_ATTN_UNROLL
                for (int mi = 0; mi < MI; ++mi) {
                    DF_ATTN_UNROLL
                    for (int ks = 0; ks < D / 16; ++ks)
                        lds_a<D>(qf[mi][ks], s_q, wr0 + mi * 16, ks, lane);
                }
            }
        }
        wide_attend<D, MI, W::kThreads, W::kKeepQ>(
            st, qf, s_q, s_k + buf * tile_bytes<D>(kBlockN), s_v + buf * tile_bytes<D>(kBlockN),
            key_tile(qk_t, base1, t), spans, wr0, scale_log2, lane);
    }
    cp_async_wait<0>();  // the Q tile's copies when no key tile was visited
    __syncthreads();

    // Normalise as fwd_kernel does (the sink joins the denominator once, here).
    const float sink = sink_log2(a.mask, h);
    uint16_t* out = a.out + static_cast<size_t>(h) * D;
    DF_ATTN_UNROLL
    for (int mi = 0; mi < MI; ++mi) {
        float m[2], l[2], inv[2];
        DF_ATTN_UNROLL
        for (int r = 0; r < 2; ++r) {
            m[r] = st.m(mi, r);
            l[r] = quad_sum(st.l(mi, r));
            float keep = 1.0f;
            if (sink > -INFINITY) {
                m[r] = fmaxf(st.m(mi, r), sink);
                keep = exp2_approx(st.m(mi, r) - m[r]);
                l[r] = l[r] * keep + exp2_approx(sink - m[r]);
            }
            inv[r] = l[r] > 0.0f ? keep / l[r] : 0.0f;
        }
        const int r0 = wr0 + mi * 16, w0 = i0 + r0;
        store_rows_bf16<D>(st.acc[mi], inv, smem, r0, lane, [&](int r) -> uint16_t* {
            return w0 + r < g.sq ? out + static_cast<size_t>(w0 + r) * q_stride : nullptr;
        });
        if (a.lse != nullptr && (lane & 3) == 0) {
            DF_ATTN_UNROLL
            for (int r = 0; r < 2; ++r) {
                const int i = w0 + (lane >> 2) + 8 * r;
                if (i < g.sq) {
                    a.lse[static_cast<size_t>(h) * g.sq + i] =
                        l[r] > 0.0f ? (m[r] + log2f(l[r])) * kLn2 : -INFINITY;
                }
            }
        }
    }
}

// ---- decode ----------------------------------------------------------------------------------
// Block (split s, kv head hk, row block rb); rows r = i * group + (h % group) of the kv head.
template <int D>
__global__ void __launch_bounds__(256)
    decode_kernel(const FwdArgs a, const DecodePlan p, float scale_log2, float* part_o,
                  float* part_ml) {
    DF_ATTN_SHARED(smem);
    pdl::wait();  // q, the cache and kv_len come from the kernels before this one
    pdl::launch_dependents();
    const int s = blockIdx.x, hk = blockIdx.y, rb = blockIdx.z;
    const int group = a.h / a.hkv;
    const int tid = threadIdx.x, nthreads = blockDim.x, warp = tid >> 5, lane = tid & 31;
    const int rows = nthreads / 32 * 16;
    const MaskGeom g = resolve_dev(a.mask);
    const int chunk = p.chunk;
    const int ntiles = decode_num_tiles(g, chunk, s);
    if (ntiles == 0) return;  // past kv_len: the combine reads only active splits
    const int r0 = rb * rows;
    const uint32_t s_q = smem_u32(smem);
    const uint32_t s_k = s_q + rows * D * 2;
    const uint32_t s_v = s_k + 2 * tile_bytes<D>(kBlockN);

    load_tile<D>(
        s_q, rows, tid, nthreads,
        [&](int r) -> const uint16_t* {
            const int rr = r0 + r;
            if (rr >= p.rows) return nullptr;
            const int i = rr / group, h = hk * group + rr % group;
            return a.q + (static_cast<size_t>(i) * a.h + h) * D;
        },
        a.q);
    load_kv_tile<D>(a, hk, decode_tile(g, chunk, s, 0), s_k, s_v, tid, nthreads);
    cp_async_commit();

    const int row = warp * 16 + (lane >> 2);
    RowSpan span[2];
    DF_ATTN_UNROLL
    for (int r = 0; r < 2; ++r) {
        const int rr = r0 + row + 8 * r;
        span[r] = rr < p.rows ? row_span(g, rr / group, nullptr) : RowSpan{};
    }
    SoftmaxState<D> st;
    st.init();
    uint32_t qf[D / 16][4];
    for (int t = 0; t < ntiles; ++t) {
        const int buf = t & 1;
        if (t + 1 < ntiles) {
            load_kv_tile<D>(a, hk, decode_tile(g, chunk, s, t + 1),
                            s_k + (buf ^ 1) * tile_bytes<D>(kBlockN),
                            s_v + (buf ^ 1) * tile_bytes<D>(kBlockN), tid, nthreads);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        if (t == 0) {
            DF_ATTN_UNROLL
            for (int ks = 0; ks < D / 16; ++ks) lds_a<D>(qf[ks], s_q, warp * 16, ks, lane);
        }
        attend_tile<D>(st, qf, s_k + buf * tile_bytes<D>(kBlockN),
                       s_v + buf * tile_bytes<D>(kBlockN), decode_tile(g, chunk, s, t), span,
                       scale_log2, lane);
        __syncthreads();
    }
    cp_async_wait<0>();

    // Partial results: unnormalised output, running max and sum of each row for this split.
    const int t4 = lane & 3;
    DF_ATTN_UNROLL
    for (int r = 0; r < 2; ++r) {
        const float l = quad_sum(st.l[r]);
        const int rr = r0 + row + 8 * r;
        if (rr >= p.rows) continue;
        const int i = rr / group, h = hk * group + rr % group;
        const size_t idx = (static_cast<size_t>(s) * a.h + h) * g.sq + i;
        float* o = part_o + idx * D;
        DF_ATTN_UNROLL
        for (int n = 0; n < D / 8; ++n) {
            *reinterpret_cast<float2*>(o + n * 8 + 2 * t4) =
                make_float2(st.acc[n][2 * r], st.acc[n][2 * r + 1]);
        }
        if (t4 == 0) *reinterpret_cast<float2*>(part_ml + 2 * idx) = make_float2(st.m[r], l);
    }
}

// One warp per (query i, head h): merges the active splits' partials in split order, then the
// sink. Splits are read from first_split on but stay on lane s % 32 and in ascending order, so a
// row merged with the extra leading splits of a verify block (each adding exact zeros) sums in
// the order it does alone. Each split's (max, sum) is read once (lane s % 32 keeps it) and its
// weight goes through shared memory, and the partial outputs are read eight splits at a time:
// read one split after another, each load waiting on the one before, the merge took longer than
// the split kernel (docs/performance.md "The combine's loads in flight").
constexpr int kCombineWarps = 4;
constexpr int kCombineBatch = 8;
constexpr int kCombineSmemBytes = kCombineWarps * kMaxDecodeSplits * 4;
__global__ void __launch_bounds__(kCombineWarps * 32)
    decode_combine_kernel(const FwdArgs a, const DecodePlan p, const float* part_o,
                          const float* part_ml) {
    DF_ATTN_SHARED(smem);
    pdl::wait();  // the decode kernel's partials
    pdl::launch_dependents();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * kCombineWarps + warp;
    const int sq = a.mask.sq;
    if (row >= sq * a.h) return;
    const int i = row / a.h, h = row % a.h;
    const MaskGeom g = resolve_dev(a.mask);
    const int kv_end = decode_kv_end(g);
    const int active = active_splits(kv_end, p.chunk);
    const int first = first_split(decode_kv_begin(g), p.chunk);
    constexpr int kPerLane = kMaxDecodeSplits / 32;
    float sm[kPerLane], sl[kPerLane];
    const float sink = sink_log2(a.mask, h);
    float m = -INFINITY;
    DF_ATTN_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
        const int s = lane + 32 * j;
        sm[j] = -INFINITY;
        sl[j] = 0.0f;
        if (s < active && s >= first) {
            const float2 x = *reinterpret_cast<const float2*>(
                part_ml + 2 * ((static_cast<size_t>(s) * a.h + h) * sq + i));
            sm[j] = x.x;
            sl[j] = x.y;
            m = fmaxf(m, x.x);
        }
    }
    DF_ATTN_UNROLL
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    m = fmaxf(m, sink);
    const float m_use = m == -INFINITY ? 0.0f : m;
    float* w_s = reinterpret_cast<float*>(smem) + warp * kMaxDecodeSplits;
    float l = 0.0f;
    DF_ATTN_UNROLL
    for (int j = 0; j < kPerLane; ++j) {
        const int s = lane + 32 * j;
        if (s >= active || s < first) continue;
        const float w = exp2_approx(sm[j] - m_use);
        w_s[s] = w;
        l += sl[j] * w;
    }
    DF_ATTN_UNROLL
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (sink > -INFINITY) l += exp2_approx(sink - m_use);
    __syncwarp();  // every lane's weights are in w_s
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    uint16_t* out = a.out + static_cast<size_t>(row) * a.d;  // row = i * H + h
    for (int d = 2 * lane; d < a.d; d += 64) {
        float2 acc = make_float2(0.0f, 0.0f);
        for (int s0 = first; s0 < active; s0 += kCombineBatch) {
            float2 x[kCombineBatch];
            DF_ATTN_UNROLL
            for (int u = 0; u < kCombineBatch; ++u) {
                const int s = s0 + u;
                x[u] = s < active
                           ? *reinterpret_cast<const float2*>(
                                 part_o + ((static_cast<size_t>(s) * a.h + h) * sq + i) * a.d + d)
                           : make_float2(0.0f, 0.0f);
            }
            DF_ATTN_UNROLL
            for (int u = 0; u < kCombineBatch; ++u) {
                if (s0 + u >= active) break;
                const float w = w_s[s0 + u];
                acc.x += w * x[u].x;
                acc.y += w * x[u].y;
            }
        }
        *reinterpret_cast<uint32_t*>(out + d) = pack_bf16(acc.x * inv, acc.y * inv);
    }
    if (a.lse != nullptr && lane == 0) {
        a.lse[static_cast<size_t>(h) * sq + i] = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
    }
}

float scale_log2_of(int d) {
    return kLog2e / sqrtf(static_cast<float>(d));
}

template <int D, int MI, int NW>
void launch_fwd_wide(const FwdArgs& a, CUstream_st* stream) {
    using W = Wide<D, MI, NW>;
    const dim3 grid(a.h, num_wide_query_tiles(a.mask.sq));
    auto* const fwd_wide = &fwd_wide_kernel<D, MI, NW>;  // the macro splits at template commas
    DF_ATTN_LAUNCH(fwd_wide, grid, W::kThreads, W::kSmemBytes, stream, a, scale_log2_of(D));
}

template <int D>
void launch_fwd(const FwdArgs& a, CUstream_st* stream) {
    const FwdTile tile = a.tile == FwdTile::automatic ? kFwdTileDefault : a.tile;
    if constexpr (D <= 128) {
        if (tile == FwdTile::rows128) return launch_fwd_wide<D, 2, 4>(a, stream);
        if (tile == FwdTile::rows128_8w) return launch_fwd_wide<D, 1, 8>(a, stream);
    }
    const dim3 grid(num_query_tiles(a.mask.sq), a.h);
    DF_ATTN_LAUNCH(fwd_kernel<D>, grid, kThreads, fwd_smem_bytes<D>(), stream, a, scale_log2_of(D));
}

template <int D>
void launch_decode(const FwdArgs& a, const DecodePlan& p, float* part_o, float* part_ml,
                   CUstream_st* stream) {
    const int smem = p.warps * 16 * D * 2 + 4 * tile_bytes<D>(kBlockN);
    const dim3 grid(p.splits, a.hkv, p.row_blocks);
    DF_PDL_LAUNCH(a.pdl, decode_kernel<D>, grid, p.warps * 32, smem, stream, a, p, scale_log2_of(D),
                  part_o, part_ml);
}

}  // namespace

void dflash_plan(const MaskArgs& m, QTileKeys* table, CUstream_st* stream) {
    const int n = num_query_tiles(m.sq);
    if (n == 0) return;
    DF_ATTN_LAUNCH(dflash_plan_kernel, cdiv(n, 128), 128, 0, stream, m, table);
}

void fwd(const FwdArgs& a, CUstream_st* stream) {
    if (a.mask.sq == 0 || a.h == 0) return;
    if (a.d == 64) {
        launch_fwd<64>(a, stream);
    } else if (a.d == 128) {
        launch_fwd<128>(a, stream);
    } else {
        launch_fwd<256>(a, stream);
    }
}

void decode(const FwdArgs& a, const DecodePlan& p, float* part_o, float* part_ml,
            CUstream_st* stream) {
    if (a.mask.sq == 0 || a.h == 0) return;
    if (a.d == 64) {
        launch_decode<64>(a, p, part_o, part_ml, stream);
    } else if (a.d == 128) {
        launch_decode<128>(a, p, part_o, part_ml, stream);
    } else {
        launch_decode<256>(a, p, part_o, part_ml, stream);
    }
    DF_PDL_LAUNCH(a.pdl, decode_combine_kernel, cdiv(a.mask.sq * a.h, kCombineWarps),
                  kCombineWarps * 32, kCombineSmemBytes, stream, a, p, part_o, part_ml);
}

}  // namespace dflash::cuda::attn

// Attention forward kernels: FlashAttention-2 over (query tile, head) blocks, the split-KV decode
// kernel with its combine, and the dflash pre-pass that turns anchors into per-query-tile key
// ranges. bf16 mma.sync m16n8k16, fp32 accumulation, online softmax in log2 units.
// Tested by tests/cuda/attention_cuda_test.cpp (tile arithmetic:
// tests/ops/attention_tiles_test.cpp).
//
// Blocks are 4 warps of 16 query rows (kBlockM = 64) against key tiles of kBlockN = 64 rows,
// double-buffered with cp.async: tile t + 1 loads while tile t is computed. The decode kernel
// packs the queries and the GQA heads of one kv head into its rows, so each K/V tile is read once
// for all of them, and splits the cache across blocks (Note in attention_tiles.h).
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/attention_mma.cuh"

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

// ---- decode ----------------------------------------------------------------------------------
// Block (split s, kv head hk, row block rb); rows r = i * group + (h % group) of the kv head.
template <int D>
__global__ void __launch_bounds__(256)
    decode_kernel(const FwdArgs a, const DecodePlan p, float scale_log2, float* part_o,
                  float* part_ml) {
    DF_ATTN_SHARED(smem);
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
// the order it does alone.
__global__ void __launch_bounds__(128)
    decode_combine_kernel(const FwdArgs a, const DecodePlan p, const float* part_o,
                          const float* part_ml) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * 4 + warp;
    const int sq = a.mask.sq;
    if (row >= sq * a.h) return;
    const int i = row / a.h, h = row % a.h;
    const MaskGeom g = resolve_dev(a.mask);
    const int kv_end = decode_kv_end(g);
    const int active = active_splits(kv_end, p.chunk);
    const int first = first_split(decode_kv_begin(g), p.chunk);
    auto ml = [&](int s) {
        return *reinterpret_cast<const float2*>(part_ml +
                                                2 * ((static_cast<size_t>(s) * a.h + h) * sq + i));
    };
    const float sink = sink_log2(a.mask, h);
    float m = -INFINITY;
    for (int s = lane; s < active; s += 32) {
        if (s >= first) m = fmaxf(m, ml(s).x);
    }
    DF_ATTN_UNROLL
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    m = fmaxf(m, sink);
    const float m_use = m == -INFINITY ? 0.0f : m;
    float l = 0.0f;
    for (int s = lane; s < active; s += 32) {
        if (s < first) continue;
        const float2 x = ml(s);
        l += x.y * exp2_approx(x.x - m_use);
    }
    DF_ATTN_UNROLL
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);
    if (sink > -INFINITY) l += exp2_approx(sink - m_use);
    const float inv = l > 0.0f ? 1.0f / l : 0.0f;
    uint16_t* out = a.out + static_cast<size_t>(row) * a.d;  // row = i * H + h
    for (int d = 2 * lane; d < a.d; d += 64) {
        float2 acc = make_float2(0.0f, 0.0f);
        for (int s = first; s < active; ++s) {
            const float w = exp2_approx(ml(s).x - m_use);
            const float2 x = *reinterpret_cast<const float2*>(
                part_o + ((static_cast<size_t>(s) * a.h + h) * sq + i) * a.d + d);
            acc.x += w * x.x;
            acc.y += w * x.y;
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

template <int D>
void launch_fwd(const FwdArgs& a, CUstream_st* stream) {
    const dim3 grid(num_query_tiles(a.mask.sq), a.h);
    DF_ATTN_LAUNCH(fwd_kernel<D>, grid, kThreads, fwd_smem_bytes<D>(), stream, a, scale_log2_of(D));
}

template <int D>
void launch_decode(const FwdArgs& a, const DecodePlan& p, float* part_o, float* part_ml,
                   CUstream_st* stream) {
    const int smem = p.warps * 16 * D * 2 + 4 * tile_bytes<D>(kBlockN);
    const dim3 grid(p.splits, a.hkv, p.row_blocks);
    DF_ATTN_LAUNCH(decode_kernel<D>, grid, p.warps * 32, smem, stream, a, p, scale_log2_of(D),
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
    DF_ATTN_LAUNCH(decode_combine_kernel, cdiv(a.mask.sq * a.h, 4), 128, 0, stream, a, p, part_o,
                   part_ml);
}

}  // namespace dflash::cuda::attn

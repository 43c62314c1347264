// Attention backward kernels, deterministic (no atomics): delta = rowsum(dO ∘ O) per row, then
// dK/dV with one block per (key tile, kv head) looping over the heads of its GQA group and the
// query tiles that see the tile in a fixed order, and dQ with one block per (query tile, head)
// looping over its key tiles. Both recompute P = exp(S - lse) from the forward's lse.
// Tested by tests/cuda/attention_cuda_test.cpp (tile arithmetic:
// tests/ops/attention_tiles_test.cpp).
//
// Warp roles: dQ warps own 16 query rows, like the forward; dK/dV warps own 16 key rows and
// compute the transposed products (Sᵀ = K Qᵀ, dPᵀ = V dOᵀ) so that Pᵀ and dSᵀ are already the A
// operands of dV += Pᵀ dO and dK += dSᵀ Q (Note [Attention smem tiles]).
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/attention_mma.cuh"

namespace dflash::cuda::attn {
namespace {

constexpr int kNt = kBlockN / 8;

template <int D>
__device__ __forceinline__ void zero_acc(float (&c)[D][4]) {
    DF_ATTN_UNROLL
    for (int n = 0; n < D; ++n) {
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e) c[n][e] = 0.0f;
    }
}

// lse in log2 units; a row that saw nothing (lse -inf) gets +inf so that exp2(s - lse) = 0.
__device__ __forceinline__ float lse_log2(float lse) {
    return lse == -INFINITY ? INFINITY : lse * kLog2e;
}

// delta[h][i] = sum_d dout[i, h, d] * out[i, h, d]; one warp per (i, h).
__global__ void __launch_bounds__(128) delta_kernel(const BwdArgs a) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * 4 + warp;  // i * H + h
    const int sq = a.mask.sq;
    if (row >= sq * a.h) return;
    const auto* x =
        reinterpret_cast<const __nv_bfloat162*>(a.dout + static_cast<size_t>(row) * a.d);
    const auto* y = reinterpret_cast<const __nv_bfloat162*>(a.out + static_cast<size_t>(row) * a.d);
    float acc = 0.0f;
    for (int c = lane; c < a.d / 2; c += 32) {
        const float2 u = __bfloat1622float2(x[c]);
        const float2 w = __bfloat1622float2(y[c]);
        acc = fmaf(u.x, w.x, acc);
        acc = fmaf(u.y, w.y, acc);
    }
    DF_ATTN_UNROLL
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) a.delta[static_cast<size_t>(row % a.h) * sq + row / a.h] = acc;
}

// ---- dQ: block (query tile, head), like the forward ----------------------------------------
// smem: Q, dO [64 x D]; K[2], V[2] [64 x D].
template <int D>
constexpr int dq_smem_bytes() {
    return 2 * tile_bytes<D>(kBlockM) + 4 * tile_bytes<D>(kBlockN);
}

template <int D>
__device__ __forceinline__ void load_kv_rows(const BwdArgs& a, int hk, int k0, int lo, int hi,
                                             uint32_t k_tile, uint32_t v_tile, int tid) {
    const size_t stride = static_cast<size_t>(a.hkv) * D;
    const uint16_t* k = a.k + static_cast<size_t>(hk) * D;
    const uint16_t* v = a.v + static_cast<size_t>(hk) * D;
    load_tile<D>(
        k_tile, kBlockN, tid, kThreads,
        [&](int r) -> const uint16_t* {
            const int j = k0 + r;
            return j >= lo && j < hi ? k + static_cast<size_t>(j) * stride : nullptr;
        },
        a.k);
    load_tile<D>(
        v_tile, kBlockN, tid, kThreads,
        [&](int r) -> const uint16_t* {
            const int j = k0 + r;
            return j >= lo && j < hi ? v + static_cast<size_t>(j) * stride : nullptr;
        },
        a.v);
}

// Query rows [i0, i0 + 64) of head h from an [Sq, H, D] tensor (zero past Sq).
template <int D>
__device__ __forceinline__ void load_q_rows(const uint16_t* base, const BwdArgs& a, int h, int i0,
                                            uint32_t tile, int tid) {
    const size_t stride = static_cast<size_t>(a.h) * D;
    const uint16_t* p = base + static_cast<size_t>(h) * D;
    load_tile<D>(
        tile, kBlockM, tid, kThreads,
        [&](int r) -> const uint16_t* {
            return i0 + r < a.mask.sq ? p + static_cast<size_t>(i0 + r) * stride : nullptr;
        },
        base);
}

// One key tile for a warp's 16 query rows: P = exp2(S - lse) (masked), dP = dO Vᵀ,
// dS = P ∘ (dP - delta), dQ += dS K (scaled at the end).
template <int D>
__device__ __forceinline__ void dq_tile(float (&dq)[D / 8][4], uint32_t s_q, uint32_t s_do,
                                        uint32_t k_tile, uint32_t v_tile, const KeyTile& kt,
                                        const RowSpan (&span)[2], const float (&nl)[2],
                                        const float (&dl)[2], float scale_log2, int warp,
                                        int lane) {
    const int t4 = lane & 3;
    float p[kNt][4];
    zero_acc<kNt>(p);
    mma_abt<D, kNt, D / 16>(
        p, [&](int ks, uint32_t(&f)[4]) { lds_a<D>(f, s_q, warp * 16, ks, lane); }, k_tile, 0,
        lane);
    DF_ATTN_UNROLL
    for (int n = 0; n < kNt; ++n) {
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e) {
            const bool ok = !kt.mask || key_ok(kt, span[e >> 1], kt.k0 + n * 8 + 2 * t4 + (e & 1));
            p[n][e] = ok ? exp2_approx(p[n][e] * scale_log2 - nl[e >> 1]) : 0.0f;
        }
    }
    float ds[kNt][4];
    zero_acc<kNt>(ds);
    mma_abt<D, kNt, D / 16>(
        ds, [&](int ks, uint32_t(&f)[4]) { lds_a<D>(f, s_do, warp * 16, ks, lane); }, v_tile, 0,
        lane);
    DF_ATTN_UNROLL
    for (int n = 0; n < kNt; ++n) {
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e) ds[n][e] = p[n][e] * (ds[n][e] - dl[e >> 1]);
    }
    mma_ab<D, D / 8, kBlockN / 16>(
        dq, [&](int ks, uint32_t(&f)[4]) { acc_to_a<kNt>(f, ds, ks); }, k_tile, 0, lane);
}

template <int D>
__global__ void __launch_bounds__(kThreads)
    dq_kernel(const BwdArgs a, float scale, float scale_log2) {
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
    const uint32_t s_do = s_q + tile_bytes<D>(kBlockM);
    const uint32_t s_k = s_do + tile_bytes<D>(kBlockM);
    const uint32_t s_v = s_k + 2 * tile_bytes<D>(kBlockN);

    load_q_rows<D>(a.q, a, h, i0, s_q, tid);
    load_q_rows<D>(a.dout, a, h, i0, s_do, tid);
    if (ntiles > 0) {
        const KeyTile kt = key_tile(qk, base1, 0);
        load_kv_rows<D>(a, hk, kt.k0, kt.lo, kt.hi, s_k, s_v, tid);
    }
    cp_async_commit();

    const int row = warp * 16 + (lane >> 2);
    RowSpan span[2];
    float nl[2], dl[2];
    DF_ATTN_UNROLL
    for (int r = 0; r < 2; ++r) {
        const int i = i0 + row + 8 * r;
        span[r] = row_span(g, i, a.mask.anchors, a.mask.ctx_start);
        const bool in = i < g.sq;
        nl[r] = in ? lse_log2(a.lse[static_cast<size_t>(h) * g.sq + i]) : INFINITY;
        dl[r] = in ? a.delta[static_cast<size_t>(h) * g.sq + i] : 0.0f;
    }
    float dq[D / 8][4];
    zero_acc<D / 8>(dq);
    for (int t = 0; t < ntiles; ++t) {
        const int buf = t & 1;
        const uint32_t k_cur = s_k + buf * tile_bytes<D>(kBlockN);
        const uint32_t v_cur = s_v + buf * tile_bytes<D>(kBlockN);
        if (t + 1 < ntiles) {
            const KeyTile nx = key_tile(qk, base1, t + 1);
            load_kv_rows<D>(a, hk, nx.k0, nx.lo, nx.hi, s_k + (buf ^ 1) * tile_bytes<D>(kBlockN),
                            s_v + (buf ^ 1) * tile_bytes<D>(kBlockN), tid);
        }
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        dq_tile<D>(dq, s_q, s_do, k_cur, v_cur, key_tile(qk, base1, t), span, nl, dl, scale_log2,
                   warp, lane);
        __syncthreads();
    }
    cp_async_wait<0>();
    __syncthreads();
    const float sc[2] = {scale, scale};
    const size_t stride = static_cast<size_t>(a.h) * D;
    uint16_t* out = a.dq + static_cast<size_t>(h) * D;
    const int w0 = i0 + warp * 16;
    store_rows_bf16<D>(dq, sc, smem, warp * 16, lane, [&](int r) -> uint16_t* {
        return w0 + r < g.sq ? out + static_cast<size_t>(w0 + r) * stride : nullptr;
    });
}

// ---- dK/dV: block (key tile, kv head) --------------------------------------------------------
// Note [Head dim 256 backward]: the hybrid families' targets have head dim 256 and their drafters
// copy it (SpecForge's Qwen3.5 drafter configs: 24 x 256 / 4 x 256 at 27B). A warp's fp32
// accumulator of 16 rows x 256 is 128 registers a thread; dK and dV together (256) cannot stay in
// registers, so at D = 256 the dK/dV pass runs as two launches that share every index and load
// but keep one accumulator each, and visit 16 query rows at a time. The extra cost is the
// recomputed Pᵀ (one more Q Kᵀ product per visit): about a third more work for the dK/dV pass.
// smem: K, V [64 x D]; Q[2], dO[2] [64 x D]; lse[2], delta[2] [64] f32; spans[2] [64].
template <int D>
struct DkdvSmem {
    static constexpr int kK = 0;
    static constexpr int kV = kK + tile_bytes<D>(kBlockN);
    static constexpr int kQ = kV + tile_bytes<D>(kBlockN);
    static constexpr int kDo = kQ + 2 * tile_bytes<D>(kBlockM);
    static constexpr int kLse = kDo + 2 * tile_bytes<D>(kBlockM);
    static constexpr int kDelta = kLse + 2 * kBlockM * 4;
    static constexpr int kSpan = kDelta + 2 * kBlockM * 4;
    static constexpr int kBytes = kSpan + 2 * kBlockM * static_cast<int>(sizeof(RowSpan));
    static constexpr int kQw = D == 256 ? 16 : D == 128 ? 32 : 64;  // query rows per step
};

// What one dK/dV launch accumulates. At D = 256 one accumulator of a warp's 16 key rows is 128
// floats a thread, so dK and dV together would spill: that head dim runs two launches, one per
// accumulator, each recomputing P (and dP for dK) from the forward's lse (Note [Head dim 256
// backward]).
enum DkdvPart : int { kDkdvBoth = 0, kDvOnly = 1, kDkOnly = 2 };

// The next (head in group, query tile) after (hh, qt) that visits key tile kv; hh == group: none.
struct Visit {
    int hh = 0;
    int qt = 0;
    int kind = 0;
};

__device__ __forceinline__ Visit next_visit(const MaskArgs& m, const MaskGeom& g, const KvTile& kv,
                                            const QTileRange& cand, int group, int splits,
                                            int split, Visit v) {
    int hh = v.hh, qt = v.qt + 1;
    while (hh < group) {
        for (; qt < cand.hi; ++qt) {
            if (!split_owns(kv, splits, split, qt)) continue;
            const int kind = visit_kind(qtile_dev(m, g, qt), kv);
            if (kind != 0) return Visit{hh, qt, kind};
        }
        ++hh;
        qt = cand.lo;
    }
    return Visit{group, 0, 0};
}

template <int D>
__device__ __forceinline__ void load_visit(const BwdArgs& a, const MaskGeom& g, int hk, int group,
                                           const Visit& v, unsigned char* smem, int buf, int tid) {
    using L = DkdvSmem<D>;
    const uint32_t base = smem_u32(smem);
    const int h = hk * group + v.hh, i0 = v.qt * kBlockM;
    load_q_rows<D>(a.q, a, h, i0, base + L::kQ + buf * tile_bytes<D>(kBlockM), tid);
    load_q_rows<D>(a.dout, a, h, i0, base + L::kDo + buf * tile_bytes<D>(kBlockM), tid);
    if (tid < kBlockM) {
        const int i = i0 + tid;
        const bool in = i < g.sq;
        const size_t at = static_cast<size_t>(h) * g.sq + (in ? i : 0);
        cp_async4(base + L::kLse + (buf * kBlockM + tid) * 4, a.lse + at, in);
        cp_async4(base + L::kDelta + (buf * kBlockM + tid) * 4, a.delta + at, in);
        // Spans are plain stores: the buffer's previous reader finished before the last barrier.
        reinterpret_cast<RowSpan*>(smem + L::kSpan)[buf * kBlockM + tid] =
            row_span(g, i, a.mask.anchors, a.mask.ctx_start);
    }
}

// One warp's part of a visit for query rows [c0, c0 + kQw) of the tile: Pᵀ [16 keys x kQw],
// dV += Pᵀ dO, dPᵀ = V dOᵀ, dSᵀ = Pᵀ ∘ (dPᵀ - delta), dK += dSᵀ Q (Part: only dV, or only dK).
// Splitting the 64 query rows of a tile in halves at D = 128 (quarters at 256) keeps Pᵀ and dSᵀ
// small enough that nothing spills.
template <int D, int Part>
__device__ __forceinline__ void dkdv_step(float (&dk)[D / 8][4], float (&dv)[D / 8][4],
                                          uint32_t s_k, uint32_t s_v, uint32_t q_tile,
                                          uint32_t do_tile, const float* lse, const float* dl,
                                          const RowSpan* span, int c0, const int (&key)[2],
                                          int load_end, bool unmasked, float scale_log2, int lane) {
    constexpr int kQw = DkdvSmem<D>::kQw, kN = kQw / 8;
    const int kr = (threadIdx.x >> 5) * 16;  // this warp's key rows
    const int t4 = lane & 3;
    float p[kN][4];
    zero_acc<kN>(p);
    mma_abt<D, kN, D / 16>(
        p, [&](int ks, uint32_t(&f)[4]) { lds_a<D>(f, s_k, kr, ks, lane); }, q_tile, c0, lane);
    DF_ATTN_UNROLL
    for (int n = 0; n < kN; ++n) {
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e) {
            const int c = c0 + n * 8 + 2 * t4 + (e & 1);  // query row of the tile
            const int j = key[e >> 1];
            const bool ok = unmasked || (j < load_end && span_has(span[c], j));
            p[n][e] = ok ? exp2_approx(p[n][e] * scale_log2 - lse_log2(lse[c])) : 0.0f;
        }
    }
    if constexpr (Part != kDkOnly) {
        mma_ab<D, D / 8, kN / 2>(
            dv, [&](int ks, uint32_t(&f)[4]) { acc_to_a<kN>(f, p, ks); }, do_tile, c0, lane);
    }
    if constexpr (Part == kDvOnly) return;
    float ds[kN][4];
    zero_acc<kN>(ds);
    mma_abt<D, kN, D / 16>(
        ds, [&](int ks, uint32_t(&f)[4]) { lds_a<D>(f, s_v, kr, ks, lane); }, do_tile, c0, lane);
    DF_ATTN_UNROLL
    for (int n = 0; n < kN; ++n) {
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e)
            ds[n][e] = p[n][e] * (ds[n][e] - dl[c0 + n * 8 + 2 * t4 + (e & 1)]);
    }
    mma_ab<D, D / 8, kN / 2>(
        dk, [&](int ks, uint32_t(&f)[4]) { acc_to_a<kN>(f, ds, ks); }, q_tile, c0, lane);
}

// A split block's fp32 partial dK (scaled) and dV for rows [k0, write_end) of its key tile.
template <int D, int Part>
__device__ __forceinline__ void store_partial(const BwdArgs& a, const KvTile& kv, int split, int hk,
                                              int kr, int lane, const float (&dk)[D / 8][4],
                                              const float (&dv)[D / 8][4], float scale) {
    const size_t n =
        static_cast<size_t>(seg0_len(a.mask.kind, a.mask.sk, a.mask.ctx_len)) * a.hkv * D;
    float* pk = a.dkdv_partial + static_cast<size_t>(split) * n + static_cast<size_t>(hk) * D;
    float* pv = pk + static_cast<size_t>(a.kv_splits) * n;
    const int t4 = lane & 3;
    DF_ATTN_UNROLL
    for (int r = 0; r < 2; ++r) {
        const int row = kv.k0 + kr + (lane >> 2) + 8 * r;
        if (row >= kv.write_end) continue;
        const size_t at = static_cast<size_t>(row) * a.hkv * D + 2 * t4;
        DF_ATTN_UNROLL
        for (int c = 0; c < D / 8; ++c) {
            if constexpr (Part != kDvOnly)
                *reinterpret_cast<float2*>(pk + at + c * 8) =
                    make_float2(dk[c][2 * r] * scale, dk[c][2 * r + 1] * scale);
            if constexpr (Part != kDkOnly)
                *reinterpret_cast<float2*>(pv + at + c * 8) =
                    make_float2(dv[c][2 * r], dv[c][2 * r + 1]);
        }
    }
}

template <int D, int Part>
__global__ void __launch_bounds__(kThreads)
    dkdv_kernel(const BwdArgs a, float scale, float scale_log2) {
    using L = DkdvSmem<D>;
    DF_ATTN_SHARED(smem);
    const int hk = blockIdx.y, group = a.h / a.hkv;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const MaskGeom g = resolve_dev(a.mask);
    const KvBlock kb = kv_block(g.kind, a.mask.sk, g.ctx_len, a.kv_splits, blockIdx.x);
    const KvTile kv = kv_tile(g, a.mask.sk, kb.kt);
    const QTileRange cand = qtile_candidates(g, kv);
    const uint32_t base = smem_u32(smem);
    const uint32_t s_k = base + L::kK, s_v = base + L::kV;
    const float* s_lse = reinterpret_cast<const float*>(smem + L::kLse);
    const float* s_delta = reinterpret_cast<const float*>(smem + L::kDelta);
    const RowSpan* s_span = reinterpret_cast<const RowSpan*>(smem + L::kSpan);

    load_kv_rows<D>(a, hk, kv.k0, kv.k0, kv.load_end, s_k, s_v, tid);
    Visit cur =
        next_visit(a.mask, g, kv, cand, group, a.kv_splits, kb.split, Visit{0, cand.lo - 1, 0});
    if (cur.hh < group) load_visit<D>(a, g, hk, group, cur, smem, 0, tid);
    cp_async_commit();

    const int kr = warp * 16;  // this warp's key rows
    const int key[2] = {kv.k0 + kr + (lane >> 2), kv.k0 + kr + (lane >> 2) + 8};
    float dk[D / 8][4], dv[D / 8][4];
    zero_acc<D / 8>(dk);
    zero_acc<D / 8>(dv);
    for (int step = 0; cur.hh < group; ++step) {
        const int buf = step & 1;
        const Visit nx = next_visit(a.mask, g, kv, cand, group, a.kv_splits, kb.split, cur);
        if (nx.hh < group) load_visit<D>(a, g, hk, group, nx, smem, buf ^ 1, tid);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const uint32_t q_cur = base + L::kQ + buf * tile_bytes<D>(kBlockM);
        const uint32_t do_cur = base + L::kDo + buf * tile_bytes<D>(kBlockM);
        const float* lse = s_lse + buf * kBlockM;
        const float* dl = s_delta + buf * kBlockM;
        const RowSpan* span = s_span + buf * kBlockM;
        DF_ATTN_UNROLL
        for (int half = 0; half < kBlockM / DkdvSmem<D>::kQw; ++half) {
            dkdv_step<D, Part>(dk, dv, s_k, s_v, q_cur, do_cur, lse, dl, span,
                               half * DkdvSmem<D>::kQw, key, kv.load_end, cur.kind == 1, scale_log2,
                               lane);
        }
        __syncthreads();
        cur = nx;
    }
    cp_async_wait<0>();
    __syncthreads();
    if (kv.seg == 0 && a.kv_splits > 1) {
        store_partial<D, Part>(a, kv, kb.split, hk, kr, lane, dk, dv, scale);
        return;
    }
    // Rows [k0, write_end) of dK and dV belong to this tile (zeros where no query sees them).
    const size_t stride = static_cast<size_t>(a.hkv) * D;
    const int w0 = kv.k0 + kr;
    auto dst = [&](uint16_t* t) {
        return [&, t](int r) -> uint16_t* {
            return w0 + r < kv.write_end ? t + static_cast<size_t>(w0 + r) * stride : nullptr;
        };
    };
    const float sc[2] = {scale, scale}, one[2] = {1.0f, 1.0f};
    if constexpr (Part != kDvOnly)
        store_rows_bf16<D>(dk, sc, smem + L::kK, kr, lane, dst(a.dk + static_cast<size_t>(hk) * D));
    if constexpr (Part != kDkOnly)
        store_rows_bf16<D>(dv, one, smem + L::kV, kr, lane,
                           dst(a.dv + static_cast<size_t>(hk) * D));
}

// dk[j], dv[j] (bf16) = the sum over splits, in split order, of the fp32 partials of the
// segment-0 rows; 4 elements per thread.
__global__ void __launch_bounds__(256) dkdv_reduce_kernel(const BwdArgs a, int len0) {
    const size_t n = static_cast<size_t>(len0) * a.hkv * a.d;
    const size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4;
    if (i >= n) return;
    const size_t per_split = n;
    for (int which = 0; which < 2; ++which) {
        const float* part = a.dkdv_partial + static_cast<size_t>(which) * a.kv_splits * n;
        float4 acc = *reinterpret_cast<const float4*>(part + i);
        for (int s = 1; s < a.kv_splits; ++s) {
            const float4 x = *reinterpret_cast<const float4*>(part + s * per_split + i);
            acc.x += x.x;
            acc.y += x.y;
            acc.z += x.z;
            acc.w += x.w;
        }
        uint16_t* dst = (which == 0 ? a.dk : a.dv) + i;
        uint2 packed;
        packed.x = pack_bf16(acc.x, acc.y);
        packed.y = pack_bf16(acc.z, acc.w);
        *reinterpret_cast<uint2*>(dst) = packed;
    }
}

template <int D>
void launch_bwd(const BwdArgs& a, CUstream_st* stream) {
    const float scale = 1.0f / sqrtf(static_cast<float>(D));
    const float scale_log2 = scale * kLog2e;
    const int nkv = num_kv_blocks(a.mask.kind, a.mask.sq, a.mask.sk, a.mask.ctx_len, a.kv_splits);
    // The launch macro takes the kernel as one argument: no comma of template arguments in it.
    const dim3 grid(nkv, a.hkv);
    if constexpr (D == 256) {
        auto* const dv_only = dkdv_kernel<D, kDvOnly>;
        auto* const dk_only = dkdv_kernel<D, kDkOnly>;
        if (nkv > 0) {
            DF_ATTN_LAUNCH(dv_only, grid, kThreads, DkdvSmem<D>::kBytes, stream, a, scale,
                           scale_log2);
            DF_ATTN_LAUNCH(dk_only, grid, kThreads, DkdvSmem<D>::kBytes, stream, a, scale,
                           scale_log2);
        }
    } else {
        auto* const both = dkdv_kernel<D, kDkdvBoth>;
        if (nkv > 0)
            DF_ATTN_LAUNCH(both, grid, kThreads, DkdvSmem<D>::kBytes, stream, a, scale, scale_log2);
    }
    const int len0 = seg0_len(a.mask.kind, a.mask.sk, a.mask.ctx_len);
    if (a.kv_splits > 1 && len0 > 0) {
        const int quads = cdiv(len0 * a.hkv * D / 4, 256);
        DF_ATTN_LAUNCH(dkdv_reduce_kernel, quads, 256, 0, stream, a, len0);
    }
    if (a.mask.sq == 0) return;
    DF_ATTN_LAUNCH(dq_kernel<D>, dim3(num_query_tiles(a.mask.sq), a.h), kThreads,
                   dq_smem_bytes<D>(), stream, a, scale, scale_log2);
}

}  // namespace

void bwd(const BwdArgs& a, CUstream_st* stream) {
    if (a.h == 0) return;
    if (a.mask.sq > 0) {
        DF_ATTN_LAUNCH(delta_kernel, cdiv(a.mask.sq * a.h, 4), 128, 0, stream, a);
    }
    if (a.d == 64) {
        launch_bwd<64>(a, stream);
    } else if (a.d == 128) {
        launch_bwd<128>(a, stream);
    } else {
        launch_bwd<256>(a, stream);
    }
}

}  // namespace dflash::cuda::attn

// Device building blocks of the attention kernels (attention_fwd.cu, attention_bwd.cu): cp.async
// tile loads into swizzled shared memory, ldmatrix, bf16 mma.sync m16n8k16 with fp32
// accumulation, and the warp-level GEMMs the kernels are made of. Included only by .cu files.
// Tested through tests/cuda/attention_cuda_test.cpp and, on the CPU,
// tests/ops/attention_emu_test.cpp.
//
// Note [Attention smem tiles]: every tile is R rows of D bf16 (a Q, K, V or dO tile; rows are
// queries or keys, columns the head dim), 16-byte chunk c of row r stored at chunk c ^ (r & 7), so
// the 8 row addresses of one ldmatrix hit 8 different bank groups. A warp owns 16 rows of the
// m16n8k16 products; in the fragment layouts g = lane / 4 and t = lane % 4, and accumulator
// c[n][e] of a 16 x 8n product holds row g + 8 * (e / 2), column 8n + 2t + (e % 2).
//
// Note [Attention kernels on the CPU]: with DF_ATTN_EMULATE defined (only by
// tests/ops/attention_emu_test.cpp, which first includes its emulator tests/ops/attention_emu.h),
// the PTX wrappers below, the dynamic shared memory and the launches go to a CPU emulator that
// runs every CUDA thread of a block as a fiber and performs ldmatrix, mma, shuffles, barriers and
// cp.async groups warp-collectively. The kernels' own code is the same in both builds, so their
// index arithmetic and fragment plumbing are checked in CI without a GPU.
#pragma once

#ifndef DF_ATTN_EMULATE
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#endif

#include <cstdint>
#include <cstring>

#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/kernels/attention_tiles.h"
#include "backend/cuda/kernels/pdl.cuh"

#ifdef DF_ATTN_EMULATE
#define DF_ATTN_UNROLL
#define DF_ATTN_SHARED(name) unsigned char* name = ::dflash::cuda::attn_emu::shared_mem()
#else
#define DF_ATTN_UNROLL _Pragma("unroll")
#define DF_ATTN_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif
// A plain launch (no programmatic dependent launch): the one launch macro of pdl.cuh, which
// also goes to the emulator when DF_ATTN_EMULATE is defined.
#define DF_ATTN_LAUNCH(kernel, grid, block, smem, stream, ...) \
    DF_PDL_LAUNCH(false, kernel, grid, block, smem, stream, __VA_ARGS__)

namespace dflash::cuda::attn {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;
constexpr int kThreads = kBlockM / 16 * 32;  // 4 warps of 16 rows (but decode, wide forward)

template <int D>
constexpr int tile_bytes(int rows) {
    return rows * D * 2;
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
#ifdef DF_ATTN_EMULATE
    return attn_emu::smem_offset(p);
#else
    return static_cast<uint32_t>(__cvta_generic_to_shared(p));
#endif
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile of D bf16 per row.
template <int D>
__device__ __forceinline__ uint32_t swz(int row, int chunk) {
    return static_cast<uint32_t>(row * (D * 2) + ((chunk ^ (row & 7)) << 4));
}

// 16 bytes global -> shared, zero-filled when !valid (src must still be a valid address).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
#ifdef DF_ATTN_EMULATE
    attn_emu::cp_async(dst, src, 16, valid ? 16 : 0);
#else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 16 : 0)
                 : "memory");
#endif
}
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool valid) {
#ifdef DF_ATTN_EMULATE
    attn_emu::cp_async(dst, src, 4, valid ? 4 : 0);
#else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src),
                 "r"(valid ? 4 : 0)
                 : "memory");
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#ifdef DF_ATTN_EMULATE
    attn_emu::cp_async_commit();
#else
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef DF_ATTN_EMULATE
    attn_emu::cp_async_wait(N);
#else
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
#ifdef DF_ATTN_EMULATE
    attn_emu::ldmatrix_x4(r, addr, false);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
#ifdef DF_ATTN_EMULATE
    attn_emu::ldmatrix_x4(r, addr, true);
#else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
#endif
}

// c += a * b for one m16n8k16 bf16 product with fp32 accumulation.
__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
#ifdef DF_ATTN_EMULATE
    attn_emu::mma16816(c, a, b0, b1);
#else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
    uint32_t r;
    memcpy(&r, &v, sizeof(r));
    return r;
}

// One bf16's bits as a float, and a float rounded to bf16 bits (to nearest even; NaN stays NaN,
// as pack_bf16 rounds): the kernels that read and write bf16 one element at a time.
__device__ __forceinline__ float bf16_to_float(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}
__device__ __forceinline__ uint16_t float_to_bf16(float f) {
    uint32_t bits;
    memcpy(&bits, &f, sizeof(bits));
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

// 2^x; -inf gives 0.
__device__ __forceinline__ float exp2_approx(float x) {
#ifdef DF_ATTN_EMULATE
    return exp2f(x);
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
#endif
}

__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// ---- tiles ---------------------------------------------------------------------------------
// Loads `rows` rows into a swizzled tile; row_ptr(r) is the global row or nullptr (zero-filled).
// `fallback` is any valid global address (the source of zero-filled copies).
template <int D, class RowPtr>
__device__ __forceinline__ void load_tile(uint32_t tile, int rows, int tid, int nthreads,
                                          RowPtr&& row_ptr, const void* fallback) {
    constexpr int kChunks = D / 8;
    for (int idx = tid; idx < rows * kChunks; idx += nthreads) {
        const int r = idx / kChunks, c = idx % kChunks;
        const uint16_t* src = row_ptr(r);
        cp_async16(tile + swz<D>(r, c), src != nullptr ? src + c * 8 : fallback, src != nullptr);
    }
}

// A fragment (16 x 16, rows r0.., columns 16 ks..) of a swizzled tile.
template <int D>
__device__ __forceinline__ void lds_a(uint32_t (&a)[4], uint32_t tile, int r0, int ks, int lane) {
    ldsm_x4(a, tile + swz<D>(r0 + (lane & 15), ks * 2 + (lane >> 4)));
}

// The bf16 A fragment for k-step ks of a product whose A is an fp32 accumulator c[16 x 8NT].
template <int NT>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c)[NT][4], int ks) {
    a[0] = pack_bf16(c[2 * ks][0], c[2 * ks][1]);
    a[1] = pack_bf16(c[2 * ks][2], c[2 * ks][3]);
    a[2] = pack_bf16(c[2 * ks + 1][0], c[2 * ks + 1][1]);
    a[3] = pack_bf16(c[2 * ks + 1][2], c[2 * ks + 1][3]);
}

// c[16 x 8NT] += A[16 x 16KS] * Bᵀ where B's rows (n) are rows n0.. of a swizzled tile and its k
// index is the tile's column: S = Q Kᵀ, dP = dO Vᵀ. a_frag(ks, a) yields A's k-step ks.
template <int D, int NT, int KS, class AFrag>
__device__ __forceinline__ void mma_abt(float (&c)[NT][4], AFrag&& a_frag, uint32_t tile, int n0,
                                        int lane) {
    DF_ATTN_UNROLL
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t a[4];
        a_frag(ks, a);
        DF_ATTN_UNROLL
        for (int np = 0; np < NT / 2; ++np) {
            uint32_t b[4];
            const int row = n0 + np * 16 + (lane & 7) + ((lane >> 4) << 3);
            ldsm_x4(b, tile + swz<D>(row, ks * 2 + ((lane >> 3) & 1)));
            mma16816(c[2 * np], a, b[0], b[1]);
            mma16816(c[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// c[16 x 8NT] += A[16 x 16KS] * B where B's k index is the tile's row (k0..) and its n index the
// tile's column: O += P V, dQ += dS K, dV += Pᵀ dO, dK += dSᵀ Q.
template <int D, int NT, int KS, class AFrag>
__device__ __forceinline__ void mma_ab(float (&c)[NT][4], AFrag&& a_frag, uint32_t tile, int k0,
                                       int lane) {
    DF_ATTN_UNROLL
    for (int ks = 0; ks < KS; ++ks) {
        uint32_t a[4];
        a_frag(ks, a);
        DF_ATTN_UNROLL
        for (int np = 0; np < NT / 2; ++np) {
            uint32_t b[4];
            const int row = k0 + ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
            ldsm_x4_t(b, tile + swz<D>(row, np * 2 + (lane >> 4)));
            mma16816(c[2 * np], a, b[0], b[1]);
            mma16816(c[2 * np + 1], a, b[2], b[3]);
        }
    }
}

// Writes a warp's 16 x D fp32 accumulator (times row_scale[0] for row g, [1] for row g + 8) as
// bf16 rows: staged in rows r0.. of a swizzled tile the warp owns, then 16-byte stores of the rows
// with row_dst(r) != nullptr.
template <int D, class RowDst>
__device__ __forceinline__ void store_rows_bf16(const float (&acc)[D / 8][4],
                                                const float (&row_scale)[2],
                                                unsigned char* tile_ptr, int r0, int lane,
                                                RowDst&& row_dst) {
    const int g = lane >> 2, t = lane & 3;
    DF_ATTN_UNROLL
    for (int n = 0; n < D / 8; ++n) {
        DF_ATTN_UNROLL
        for (int h = 0; h < 2; ++h) {
            const uint32_t off = swz<D>(r0 + g + 8 * h, n) + t * 4;
            *reinterpret_cast<uint32_t*>(tile_ptr + off) =
                pack_bf16(acc[n][2 * h] * row_scale[h], acc[n][2 * h + 1] * row_scale[h]);
        }
    }
    __syncwarp();
    constexpr int kChunks = D / 8;
    for (int idx = lane; idx < 16 * kChunks; idx += 32) {
        const int r = idx / kChunks, c = idx % kChunks;
        uint16_t* dst = row_dst(r);
        if (dst != nullptr) {
            *reinterpret_cast<uint4*>(dst + c * 8) =
                *reinterpret_cast<const uint4*>(tile_ptr + swz<D>(r0 + r, c));
        }
    }
}

// ---- the mask at run time ------------------------------------------------------------------
__device__ __forceinline__ MaskGeom resolve_dev(const MaskArgs& m) {
    const bool has = m.kv_len != nullptr;
    return resolve_mask(m.kind, m.sq, m.sk, m.q_offset, m.ctx_len, m.block, has,
                        has ? __ldg(m.kv_len) : 0, m.window, m.causal_block);
}

// Head h's sink logit in the kernels' log2 units of scaled scores; -inf without sinks.
__device__ __forceinline__ float sink_log2(const MaskArgs& m, int h) {
    return m.sinks != nullptr ? __ldg(m.sinks + h) * kLog2e : -INFINITY;
}

__device__ __forceinline__ QTileKeys qtile_dev(const MaskArgs& m, const MaskGeom& g, int qt) {
    if (m.kind == kDflash) return m.qtiles[qt];
    return qtile_keys(g, qt, nullptr);
}

// Whether element key j of a visited tile counts for a row with span s (see KeyTile).
__device__ __forceinline__ bool key_ok(const KeyTile& k, const RowSpan& s, int j) {
    return j >= k.lo && j < k.hi && span_has(s, j);
}

// ---- the forward's per-warp state and step (shared by fwd and decode) -----------------------
template <int D>
struct SoftmaxState {
    float m[2];  // running max of the rows g, g + 8, in log2 units of scaled scores
    float l[2];  // this thread's share of the running sums (summed over the quad at the end)
    float acc[D / 8][4];

    __device__ __forceinline__ void init() {
        DF_ATTN_UNROLL
        for (int r = 0; r < 2; ++r) {
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        DF_ATTN_UNROLL
        for (int n = 0; n < D / 8; ++n) {
            DF_ATTN_UNROLL
            for (int e = 0; e < 4; ++e) acc[n][e] = 0.0f;
        }
    }
};

// One key tile for a warp's 16 query rows: S = Q Kᵀ from the Q fragments, element mask when the
// tile needs it, online softmax update, O += P V.
template <int D>
__device__ __forceinline__ void attend_tile(SoftmaxState<D>& st, const uint32_t (&qf)[D / 16][4],
                                            uint32_t k_tile, uint32_t v_tile, const KeyTile& kt,
                                            const RowSpan (&span)[2], float scale_log2, int lane) {
    float s[kBlockN / 8][4];
    DF_ATTN_UNROLL
    for (int n = 0; n < kBlockN / 8; ++n) {
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e) s[n][e] = 0.0f;
    }
    mma_abt<D, kBlockN / 8, D / 16>(
        s,
        [&](int ks, uint32_t(&a)[4]) {
            DF_ATTN_UNROLL
            for (int e = 0; e < 4; ++e) a[e] = qf[ks][e];
        },
        k_tile, 0, lane);
    const int t = lane & 3;
    float mx[2] = {-INFINITY, -INFINITY};
    DF_ATTN_UNROLL
    for (int n = 0; n < kBlockN / 8; ++n) {
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e) {
            float x = s[n][e] * scale_log2;
            if (kt.mask && !key_ok(kt, span[e >> 1], kt.k0 + n * 8 + 2 * t + (e & 1))) {
                x = -INFINITY;
            }
            s[n][e] = x;
            mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
    }
    float m_use[2];
    DF_ATTN_UNROLL
    for (int r = 0; r < 2; ++r) {
        const float m_new = fmaxf(st.m[r], quad_max(mx[r]));
        m_use[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row that has seen nothing yet
        const float corr = exp2_approx(st.m[r] - m_use[r]);
        st.m[r] = m_new;
        st.l[r] *= corr;
        DF_ATTN_UNROLL
        for (int n = 0; n < D / 8; ++n) {
            st.acc[n][2 * r] *= corr;
            st.acc[n][2 * r + 1] *= corr;
        }
    }
    DF_ATTN_UNROLL
    for (int n = 0; n < kBlockN / 8; ++n) {
        DF_ATTN_UNROLL
        for (int e = 0; e < 4; ++e) {
            const float p = exp2_approx(s[n][e] - m_use[e >> 1]);
            s[n][e] = p;
            st.l[e >> 1] += p;
        }
    }
    mma_ab<D, D / 8, kBlockN / 16>(
        st.acc, [&](int ks, uint32_t(&a)[4]) { acc_to_a<kBlockN / 8>(a, s, ks); }, v_tile, 0, lane);
}

}  // namespace dflash::cuda::attn

// The chunked gated delta rule on CUDA (kernels/gdn.h: chunked; the algebra is Note [gdn chunked
// reference] in backend/cpu/gdn.cpp). Forward only. Tested by tests/cuda/gdn_cuda_test.cpp.
//
// Note [gdn chunked kernel]: the sequence is cut into chunks of 64 tokens and the chunks into
// segments whose per-chunk matrices fit the op workspace (kChunkedScratchBudget). Per segment:
//   1. prep (one block per (chunk, value head), all chunks at once): the in-chunk cumulative gates
//      G, A = strictly-lower(beta K K^T * exp(G_i - G_j)), P = lower-incl(Q K^T * exp(G_i - G_j)),
//      and [W | U] = (I + A)^-1 [beta exp(G) K | beta V] by forward substitution (one thread per
//      column, so no barrier inside the substitution). G, W, U, P go to the workspace.
//   2. state (one block per (value head, 32 columns of dv)): walks the segment's chunks in order
//      with its slice of the state in shared memory: V' = U - W S, O = (Q exp(G)) S + P V',
//      S <- exp(G_L) S + (K exp(G_L - G))^T V'.
// Everything is f32 on CUDA cores (no tensor cores yet); each sum has one fixed order and there
// are no atomics, so results are deterministic. No host synchronisation and no allocation: the
// launches record into a CUDA graph.
#include <cuda_runtime.h>

#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/gdn.h"

namespace dflash::cuda::gdn {
namespace {

constexpr int kThreadsPerBlock = 256;     // 8 warps
constexpr int kTransStride = kChunk + 4;  // row stride of the transposed K / Q tiles (float4 rows)
constexpr int kAStride = kChunk + 4;      // float4 rows
constexpr int kLoadBatch = 8;             // float4 loads in flight per thread
constexpr int kSolveRows = 16;            // rows of the forward substitution held in registers
constexpr int kSliceCols = 32;            // state columns per block of the state pass
constexpr int kRowsPerWarp = kMaxChunkedDim / 8;  // state rows per warp in the update (16)

// One segment's per-chunk matrices in the op workspace (offsets in floats, 64-float aligned).
struct Scratch {
    float* G = nullptr;  // [Hv, seg_tokens]: cumulative gates within each chunk
    float* W = nullptr;  // [Hv, seg_tokens, dk]
    float* U = nullptr;  // [Hv, seg_tokens, dv]
    float* P = nullptr;  // [Hv, seg_chunks, 64, 64]
    int seg_chunks = 0;
    __host__ __device__ int64_t seg_tokens() const {
        return static_cast<int64_t>(seg_chunks) * kChunk;
    }
};

int64_t align64(int64_t n) {
    return (n + 63) / 64 * 64;
}

struct Layout {
    int seg_chunks;
    int64_t g, w, u, p, total;  // float offsets and the total
};

Layout layout(int S, int Hv, int dk, int dv) {
    const int chunks = (S + kChunk - 1) / kChunk;
    const auto per_chunk =
        static_cast<int64_t>(Hv) * (kChunk * (1 + dk + dv) + kChunk * kChunk) * 4 + 4 * 256;
    const auto fit = static_cast<int64_t>(kChunkedScratchBudget) / per_chunk;
    Layout l{};
    l.seg_chunks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(fit, chunks)));
    const int64_t tokens = static_cast<int64_t>(l.seg_chunks) * kChunk;
    l.g = 0;
    l.w = l.g + align64(Hv * tokens);
    l.u = l.w + align64(Hv * tokens * dk);
    l.p = l.u + align64(Hv * tokens * dv);
    l.total = l.p + align64(static_cast<int64_t>(Hv) * l.seg_chunks * kChunk * kChunk);
    return l;
}

size_t prep_smem_bytes(int dk, int dv) {
    return sizeof(float) * static_cast<size_t>(2 * dk * kTransStride + kChunk * kAStride +
                                               kChunk * (dk + dv) + 3 * kChunk);
}

size_t state_smem_bytes(int dk) {
    const int ld = dk + 4;
    return sizeof(float) * static_cast<size_t>(dk * kSliceCols + kChunk * ld + kChunk * kChunk +
                                               kChunk * kSliceCols + 3 * kChunk);
}

// Reads the first `rows` of 64 rows of `width` floats (a multiple of 4; row i at src + i *
// stride) as float4 and hands each to put(i, column, value); rows at and past `rows` are handed
// zeros without being read. Each thread issues kLoadBatch loads before it uses any, so their
// latencies overlap: loads issued one after another, each waiting for the last, cost most of
// the time of this kernel's first version.
template <class Put>
__device__ __forceinline__ void load_rows(const float* src, int64_t stride, int rows, int width,
                                          Put&& put) {
    const int per_row = width / 4, n4 = kChunk * per_row;
    for (int base = threadIdx.x; base < n4; base += kLoadBatch * kThreadsPerBlock) {
        float4 v[kLoadBatch];
#pragma unroll
        for (int b = 0; b < kLoadBatch; ++b) {
            const int idx = base + b * kThreadsPerBlock, i = idx / per_row;
            v[b] = float4{0.0f, 0.0f, 0.0f, 0.0f};
            if (idx < n4 && i < rows)
                v[b] = *reinterpret_cast<const float4*>(src + i * stride + 4 * (idx % per_row));
        }
#pragma unroll
        for (int b = 0; b < kLoadBatch; ++b) {
            const int idx = base + b * kThreadsPerBlock;
            if (idx < n4) put(idx / per_row, 4 * (idx % per_row), v[b]);
        }
    }
}

__global__ void __launch_bounds__(kThreadsPerBlock)
    prep_kernel(RuleArgs a, Scratch sc, int chunk0) {
    extern __shared__ float4 smem4[];
    float* sm = reinterpret_cast<float*>(smem4);
    const int dk = a.dk, dv = a.dv, nc = dk + dv;
    const int ci = blockIdx.x, h = blockIdx.y;
    const int t0 = (chunk0 + ci) * kChunk;
    const int L = min(kChunk, a.S - t0);
    const int kh = h / (a.Hv / a.Hk);
    float* Kt = sm;                      // [dk][kTransStride]: K transposed
    float* Qt = Kt + dk * kTransStride;  // [dk][kTransStride]
    float* At = Qt + dk * kTransStride;  // [64][kAStride]: A transposed (At[j][i] = A_ij)
    float* X = At + kChunk * kAStride;   // [64][dk + dv]: the solved rows of W | U
    float* G = X + kChunk * nc;          // [64]
    float* B = G + kChunk;               // [64] beta
    float* EG = B + kChunk;              // [64] exp(G)
    const int tid = threadIdx.x;

    if (tid == 0) {
        // The same sequential sum as the CPU reference.
        float cum = 0.0f;
        for (int i = 0; i < kChunk; ++i) {
            if (i < L) cum += a.g[static_cast<int64_t>(t0 + i) * a.Hv + h];
            G[i] = cum;
        }
    }
    if (tid < kChunk) B[tid] = tid < L ? a.beta[static_cast<int64_t>(t0 + tid) * a.Hv + h] : 0.0f;
    const int64_t qk0 = (static_cast<int64_t>(t0) * a.Hk + kh) * dk, qk_stride = a.Hk * dk;
    const auto transpose_into = [&](float* dst) {
        return [dst](int i, int r, float4 x) {
            dst[r * kTransStride + i] = x.x;
            dst[(r + 1) * kTransStride + i] = x.y;
            dst[(r + 2) * kTransStride + i] = x.z;
            dst[(r + 3) * kTransStride + i] = x.w;
        };
    };
    load_rows(a.k + qk0, qk_stride, L, dk, transpose_into(Kt));
    load_rows(a.q + qk0, qk_stride, L, dk, transpose_into(Qt));
    __syncthreads();
    if (tid < kChunk) {
        sc.G[h * sc.seg_tokens() + ci * kChunk + tid] = G[tid];
        EG[tid] = expf(G[tid]);
    }

    // A and P, a 4x4 tile of each per thread.
    {
        const int ti = tid / 16, tj = tid % 16;
        float ak[4][4] = {}, aq[4][4] = {};
        for (int r = 0; r < dk; ++r) {
            const float4 ki = *reinterpret_cast<const float4*>(Kt + r * kTransStride + 4 * ti);
            const float4 kj = *reinterpret_cast<const float4*>(Kt + r * kTransStride + 4 * tj);
            const float4 qi = *reinterpret_cast<const float4*>(Qt + r * kTransStride + 4 * ti);
            const float kiv[4] = {ki.x, ki.y, ki.z, ki.w};
            const float kjv[4] = {kj.x, kj.y, kj.z, kj.w};
            const float qiv[4] = {qi.x, qi.y, qi.z, qi.w};
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int w = 0; w < 4; ++w) {
                    ak[u][w] += kiv[u] * kjv[w];
                    aq[u][w] += qiv[u] * kjv[w];
                }
        }
        float* P = sc.P + (static_cast<int64_t>(h) * sc.seg_chunks + ci) * kChunk * kChunk;
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
            for (int w = 0; w < 4; ++w) {
                const int i = 4 * ti + u, j = 4 * tj + w;
                // exp(G_i - G_j) only where i >= j: elsewhere it could overflow.
                const float decay = i >= j ? expf(G[i] - G[j]) : 0.0f;
                At[j * kAStride + i] = i > j ? B[i] * ak[u][w] * decay : 0.0f;
                P[i * kChunk + j] = aq[u][w] * decay;
            }
    }
    __syncthreads();  // A complete

    // Forward substitution, one column of [beta exp(G) K | beta V] per thread, in blocks of 16
    // rows held in registers: x_i -= sum_{j < i} A_ij x_j with j ascending, first over the
    // solved rows before the block (each x_j read once from shared memory for 16 rows, A^T
    // columns as float4), then within the block. Rows at and past L are zero and stay zero
    // (their A rows are zero). A thread reads back only its own column: no barrier needed.
    const int64_t row0 = h * sc.seg_tokens() + ci * kChunk;
    for (int c = tid; c < nc; c += kThreadsPerBlock) {
        for (int i0 = 0; i0 < kChunk; i0 += kSolveRows) {
            float x[kSolveRows];
#pragma unroll
            for (int u = 0; u < kSolveRows; ++u) {
                const int i = i0 + u;
                x[u] = 0.0f;
                if (i < L) {
                    x[u] =
                        c < dk
                            ? B[i] * EG[i] * Kt[c * kTransStride + i]
                            : B[i] * a.v[(static_cast<int64_t>(t0 + i) * a.Hv + h) * dv + (c - dk)];
                }
            }
            for (int j = 0; j < i0; ++j) {
                const float xj = X[j * nc + c];
                const float* col = At + j * kAStride + i0;
#pragma unroll
                for (int u = 0; u < kSolveRows; u += 4) {
                    const float4 a4 = *reinterpret_cast<const float4*>(col + u);
                    x[u] -= a4.x * xj;
                    x[u + 1] -= a4.y * xj;
                    x[u + 2] -= a4.z * xj;
                    x[u + 3] -= a4.w * xj;
                }
            }
#pragma unroll
            for (int u = 1; u < kSolveRows; ++u)
#pragma unroll
                for (int w = 0; w < u; ++w) x[u] -= At[(i0 + w) * kAStride + i0 + u] * x[w];
#pragma unroll
            for (int u = 0; u < kSolveRows; ++u) {
                const int i = i0 + u;
                X[i * nc + c] = x[u];
                if (c < dk) {
                    sc.W[(row0 + i) * dk + c] = x[u];
                } else {
                    sc.U[(row0 + i) * dv + (c - dk)] = x[u];
                }
            }
        }
    }
}

// Two blocks fit an SM (about 75 KB of shared memory each at dk = 128): the chunk's three [64, dk]
// operands W, Q' and K' take turns in one buffer.
__global__ void __launch_bounds__(kThreadsPerBlock, 2)
    state_kernel(RuleArgs a, Scratch sc, int chunk0, int chunks) {
    extern __shared__ float4 smem4[];
    float* sm = reinterpret_cast<float*>(smem4);
    const int dk = a.dk, dv = a.dv, ld = dk + 4;
    const int h = blockIdx.y, c0 = blockIdx.x * kSliceCols;
    const int kh = h / (a.Hv / a.Hk);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int col = c0 + lane;
    const bool col_ok = col < dv;
    float* Ss = sm;                    // [dk][32]: this block's state columns
    float* X = Ss + dk * kSliceCols;   // [64][ld]: W, then q_i exp(G_i), then k_j exp(G_L - G_j)
    float* Pc = X + kChunk * ld;       // [64][64]
    float* Vp = Pc + kChunk * kChunk;  // [64][32]: V' = U - W S
    float* G = Vp + kChunk * kSliceCols;
    float* eq = G + kChunk;
    float* ek = eq + kChunk;
    float* st = a.state + static_cast<int64_t>(h) * dk * dv;

    for (int idx = tid; idx < dk * kSliceCols; idx += kThreadsPerBlock) {
        const int r = idx / kSliceCols, cc = c0 + idx % kSliceCols;
        Ss[idx] = cc < dv ? st[static_cast<int64_t>(r) * dv + cc] : 0.0f;
    }
    const int i0 = warp * 8;  // output rows of this warp in the V' and O products
    // acc[u] += sum_r X[i0 + u][r] * Ss[r][lane] (X rows as float4, Ss columns as scalars).
    const auto times_state = [&](float(&acc)[8]) {
        for (int r = 0; r < dk; r += 4) {
            const float s0 = Ss[r * kSliceCols + lane], s1 = Ss[(r + 1) * kSliceCols + lane];
            const float s2 = Ss[(r + 2) * kSliceCols + lane], s3 = Ss[(r + 3) * kSliceCols + lane];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const float4 x = *reinterpret_cast<const float4*>(X + (i0 + u) * ld + r);
                acc[u] += x.x * s0 + x.y * s1 + x.z * s2 + x.w * s3;
            }
        }
    };
    for (int ci = 0; ci < chunks; ++ci) {
        const int t0 = (chunk0 + ci) * kChunk;
        const int L = min(kChunk, a.S - t0);
        const int64_t row0 = h * sc.seg_tokens() + ci * kChunk;
        const int64_t qk0 = (static_cast<int64_t>(t0) * a.Hk + kh) * dk, qk_stride = a.Hk * dk;
        __syncthreads();  // the previous chunk is done with every buffer
        if (tid < kChunk) G[tid] = sc.G[row0 + tid];
        load_rows(sc.W + row0 * dk, dk, kChunk, dk,
                  [&](int i, int r, float4 x) { *reinterpret_cast<float4*>(X + i * ld + r) = x; });
        const float* P = sc.P + (static_cast<int64_t>(h) * sc.seg_chunks + ci) * kChunk * kChunk;
        load_rows(P, kChunk, kChunk, kChunk, [&](int i, int j, float4 x) {
            *reinterpret_cast<float4*>(Pc + i * kChunk + j) = x;
        });
        __syncthreads();
        if (tid < kChunk) {
            eq[tid] = tid < L ? expf(G[tid]) : 0.0f;
            ek[tid] = tid < L ? expf(G[L - 1] - G[tid]) : 0.0f;
        }

        // V' = U - W S for rows i0..i0+7, column `lane`.
        float acc[8] = {};
        times_state(acc);
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            const int i = i0 + u;
            Vp[i * kSliceCols + lane] = col_ok ? sc.U[(row0 + i) * dv + col] - acc[u] : 0.0f;
        }
        __syncthreads();  // W is used up; eq and ek are ready

        // O = Q' S + P V'.
        load_rows(a.q + qk0, qk_stride, L, dk, [&](int i, int r, float4 x) {
            const float e = eq[i];
            *reinterpret_cast<float4*>(X + i * ld + r) = float4{x.x * e, x.y * e, x.z * e, x.w * e};
        });
        __syncthreads();
#pragma unroll
        for (int u = 0; u < 8; ++u) acc[u] = 0.0f;
        times_state(acc);
        for (int j = 0; j < i0 + 8; ++j) {
            const float vj = Vp[j * kSliceCols + lane];
#pragma unroll
            for (int u = 0; u < 8; ++u) acc[u] += Pc[(i0 + u) * kChunk + j] * vj;
        }
        if (col_ok) {
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int i = i0 + u;
                if (i < L) a.o[(static_cast<int64_t>(t0 + i) * a.Hv + h) * dv + col] = acc[u];
            }
        }
        __syncthreads();  // every warp is done with Q' and the old state

        // S <- exp(G_L) S + K'^T V' for rows warp*16 .. warp*16+15 (those below dk).
        load_rows(a.k + qk0, qk_stride, L, dk, [&](int i, int r, float4 x) {
            const float e = ek[i];
            *reinterpret_cast<float4*>(X + i * ld + r) = float4{x.x * e, x.y * e, x.z * e, x.w * e};
        });
        __syncthreads();
        float upd[kRowsPerWarp] = {};
        for (int j = 0; j < L; ++j) {
            const float vj = Vp[j * kSliceCols + lane];
#pragma unroll
            for (int m4 = 0; m4 < kRowsPerWarp / 4; ++m4) {
                const int r = warp * kRowsPerWarp + 4 * m4;
                if (r < dk) {
                    const float4 k = *reinterpret_cast<const float4*>(X + j * ld + r);
                    upd[4 * m4] += k.x * vj;
                    upd[4 * m4 + 1] += k.y * vj;
                    upd[4 * m4 + 2] += k.z * vj;
                    upd[4 * m4 + 3] += k.w * vj;
                }
            }
        }
        const float carry = expf(G[L - 1]);
#pragma unroll
        for (int m = 0; m < kRowsPerWarp; ++m) {
            const int r = warp * kRowsPerWarp + m;
            if (r < dk) Ss[r * kSliceCols + lane] = carry * Ss[r * kSliceCols + lane] + upd[m];
        }
    }
    __syncthreads();
    for (int idx = tid; idx < dk * kSliceCols; idx += kThreadsPerBlock) {
        const int r = idx / kSliceCols, cc = c0 + idx % kSliceCols;
        if (cc < dv) st[static_cast<int64_t>(r) * dv + cc] = Ss[idx];
    }
}

}  // namespace

size_t chunked_scratch_bytes(int S, int Hv, int dk, int dv) {
    if (S <= 0) return 0;
    return static_cast<size_t>(layout(S, Hv, dk, dv).total) * sizeof(float);
}

void chunked(const RuleArgs& a, void* scratch, CUstream_st* stream) {
    if (a.S <= 0) return;
    const Layout l = layout(a.S, a.Hv, a.dk, a.dv);
    float* base = static_cast<float*>(scratch);
    Scratch sc;
    sc.G = base + l.g;
    sc.W = base + l.w;
    sc.U = base + l.u;
    sc.P = base + l.p;
    sc.seg_chunks = l.seg_chunks;
    const size_t prep_smem = prep_smem_bytes(a.dk, a.dv);
    const size_t state_smem = state_smem_bytes(a.dk);
    // Dynamic shared memory above 48 KB must be allowed per kernel before the launch.
    DF_CUDA_CHECK(cudaFuncSetAttribute(prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(prep_smem)));
    DF_CUDA_CHECK(cudaFuncSetAttribute(state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(state_smem)));
    const int chunks = (a.S + kChunk - 1) / kChunk;
    for (int c0 = 0; c0 < chunks; c0 += l.seg_chunks) {
        const int n = std::min(l.seg_chunks, chunks - c0);
        prep_kernel<<<dim3(static_cast<unsigned>(n), static_cast<unsigned>(a.Hv)), kThreadsPerBlock,
                      prep_smem, stream>>>(a, sc, c0);
        DF_CUDA_CHECK_LAUNCH(prep_kernel);
        const auto slices = static_cast<unsigned>((a.dv + kSliceCols - 1) / kSliceCols);
        state_kernel<<<dim3(slices, static_cast<unsigned>(a.Hv)), kThreadsPerBlock, state_smem,
                       stream>>>(a, sc, c0, n);
        DF_CUDA_CHECK_LAUNCH(state_kernel);
    }
}

}  // namespace dflash::cuda::gdn

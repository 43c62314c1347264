// Gated DeltaNet kernels (kernels/gdn.h) other than the chunked rule: the short conv and its cache
// roll, the recurrence's inputs, the token-by-token delta rule and the gated output norm. No host
// synchronisation and no allocation (every op records into a CUDA graph), no atomics: each sum has
// one fixed order, so results are deterministic. Forward only. Tested by
// tests/cuda/gdn_cuda_test.cpp.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/gdn.h"
#include "backend/cuda/kernels/grid_stride.cuh"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::gdn {
namespace {

using kernels::bf16_bits_to_f32;
using kernels::f32_to_bf16_bits;
using kernels::for_each_index;
using kernels::grid_blocks;
using kernels::kThreads;

constexpr unsigned kFull = 0xffffffffu;

// Never evaluates exp of a large positive number.
__device__ __forceinline__ float sigmoid(float v) {
    if (v >= 0.0f) return 1.0f / (1.0f + expf(-v));
    const float e = expf(v);
    return e / (1.0f + e);
}

__device__ __forceinline__ float silu(float v) {
    return v * sigmoid(v);
}

// torch's softplus (threshold 20).
__device__ __forceinline__ float softplus(float v) {
    return v > 20.0f ? v : log1pf(expf(v));
}

__device__ __forceinline__ float bf(uint16_t h) {
    return bf16_bits_to_f32(h);
}

__device__ __forceinline__ float round_bf16(float f) {
    return bf16_bits_to_f32(f32_to_bf16_bits(f));
}

__device__ __forceinline__ float warp_sum(float v) {
    for (int off = 16; off > 0; off /= 2) v += __shfl_xor_sync(kFull, v, off);
    return v;
}

__device__ __forceinline__ int applied(const int32_t* count, int S) {
    if (count == nullptr) return S;
    const int n = count[0];
    return n < 0 ? 0 : (n > S ? S : n);
}

// ---- conv
// ----------------------------------------------------------------------------------------

__global__ void conv_kernel(const uint16_t* __restrict__ x, const uint16_t* __restrict__ w,
                            const float* __restrict__ state, uint16_t* __restrict__ y, int64_t S,
                            int C, int K) {
    for_each_index(S * C, [&](int64_t e) {
        const int64_t t = e / C;
        const int c = static_cast<int>(e % C);
        float acc = 0.0f;
        for (int j = 0; j < K; ++j) {
            const int64_t src = t - K + 1 + j;  // row of u = [state ; x], shifted by K-1
            const float u = src < 0 ? state[(src + K - 1) * C + c] : bf(x[src * C + c]);
            acc = __fadd_rn(acc, __fmul_rn(bf(w[static_cast<int64_t>(c) * K + j]), u));
        }
        y[e] = static_cast<uint16_t>(f32_to_bf16_bits(silu(acc)));
    });
}

// One thread per channel walks the K-1 rows in ascending order: row r is written from row n + r
// >= r of [state ; x], which no thread has overwritten yet, so the roll is safe in place.
__global__ void conv_advance_kernel(float* __restrict__ state, const uint16_t* __restrict__ x,
                                    const int32_t* __restrict__ count, int S, int C, int K) {
    const int n = applied(count, S);
    const int keep = K - 1;
    for_each_index(C, [&](int64_t c) {
        for (int r = 0; r < keep; ++r) {
            const int src = n + r;
            state[static_cast<int64_t>(r) * C + c] =
                src < keep ? state[static_cast<int64_t>(src) * C + c]
                           : bf(x[static_cast<int64_t>(src - keep) * C + c]);
        }
    });
}

// ---- prepare
// ---------------------------------------------------------------------------------------

constexpr int kPrepareWarps = 4;

__device__ __forceinline__ float param(const void* p, bool is_bf16, int i) {
    return is_bf16 ? bf(static_cast<const uint16_t*>(p)[i]) : static_cast<const float*>(p)[i];
}

// One block per token: warps take the 2*Hk key heads (q's, then k's) in turn, each L2-normalised
// with a fixed butterfly; then v is widened and g, beta computed per value head.
__global__ void __launch_bounds__(kPrepareWarps * 32) prepare_kernel(PrepareArgs a) {
    const int t = blockIdx.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t C = 2 * a.Hk * a.dk + a.Hv * a.dv;
    const uint16_t* row = a.conv_out + t * C;
    const float qscale = 1.0f / sqrtf(static_cast<float>(a.dk));
    for (int head = warp; head < 2 * a.Hk; head += kPrepareWarps) {
        const bool is_q = head < a.Hk;
        const int kh = is_q ? head : head - a.Hk;
        const uint16_t* src = row + static_cast<int64_t>(head) * a.dk;
        float ss = 0.0f;
        for (int c = lane; c < a.dk; c += 32) ss += bf(src[c]) * bf(src[c]);
        const float inv = 1.0f / sqrtf(warp_sum(ss) + 1e-6f);
        float* dst = (is_q ? a.q : a.k) + (static_cast<int64_t>(t) * a.Hk + kh) * a.dk;
        for (int c = lane; c < a.dk; c += 32) {
            const float n = bf(src[c]) * inv;
            dst[c] = is_q ? n * qscale : n;
        }
    }
    const int vw = a.Hv * a.dv;
    for (int c = threadIdx.x; c < vw; c += blockDim.x)
        a.v[static_cast<int64_t>(t) * vw + c] = bf(row[2 * a.Hk * a.dk + c]);
    for (int h = threadIdx.x; h < a.Hv; h += blockDim.x) {
        const int64_t i = static_cast<int64_t>(t) * a.Hv + h;
        const float dt = param(a.dt_bias, a.dt_bias_bf16, h);
        a.g[i] = -expf(param(a.a_log, a.a_log_bf16, h)) * softplus(bf(a.a[i]) + dt);
        a.beta[i] = sigmoid(bf(a.b[i]));
    }
}

// ---- recurrent
// --------------------------------------------------------------------------------------

constexpr int kRecWarps = 4;  // the state rows are split over 4 warps
constexpr int kRecCols = 32;  // one state column per lane

// Block (value head h, 32 columns of dv). Thread (warp w, lane l) holds rows [w*ROWS, (w+1)*ROWS)
// of column c = 32 * blockIdx.y + l of the head's state in registers for the whole sequence; each
// token's two reductions over dk (S^T k and S^T q) add the four warps' partials in a fixed order.
template <int ROWS>
__global__ void __launch_bounds__(kRecWarps * 32) recurrent_kernel(RuleArgs a) {
    __shared__ float kq[2][kRecWarps * ROWS];
    __shared__ float part[2][kRecWarps][kRecCols];
    const int h = blockIdx.x;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int c = blockIdx.y * kRecCols + lane;
    const bool col_ok = c < a.dv;
    const int kh = h / (a.Hv / a.Hk);
    const int n = applied(a.count, a.S);
    float* st = a.state + static_cast<int64_t>(h) * a.dk * a.dv;
    float s[ROWS];
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        const int r = warp * ROWS + m;
        s[m] = (col_ok && r < a.dk) ? st[static_cast<int64_t>(r) * a.dv + c] : 0.0f;
    }
    for (int t = 0; t < n; ++t) {
        const int64_t qk_off = (static_cast<int64_t>(t) * a.Hk + kh) * a.dk;
        for (int r = threadIdx.x; r < kRecWarps * ROWS; r += blockDim.x) {
            kq[0][r] = r < a.dk ? a.k[qk_off + r] : 0.0f;
            kq[1][r] = r < a.dk ? a.q[qk_off + r] : 0.0f;
        }
        const int64_t hv = static_cast<int64_t>(t) * a.Hv + h;
        const float decay = expf(a.g[hv]);
        const float beta = a.beta[hv];
        __syncthreads();
        float pk = 0.0f;
#pragma unroll
        for (int m = 0; m < ROWS; ++m) {
            s[m] *= decay;
            pk += s[m] * kq[0][warp * ROWS + m];
        }
        part[0][warp][lane] = pk;
        __syncthreads();
        float kv = 0.0f;
#pragma unroll
        for (int w = 0; w < kRecWarps; ++w) kv += part[0][w][lane];
        const float vc = col_ok ? a.v[hv * a.dv + c] : 0.0f;
        const float e = beta * (vc - kv);
        float pq = 0.0f;
#pragma unroll
        for (int m = 0; m < ROWS; ++m) {
            s[m] += kq[0][warp * ROWS + m] * e;
            pq += s[m] * kq[1][warp * ROWS + m];
        }
        part[1][warp][lane] = pq;
        __syncthreads();
        if (warp == 0 && col_ok && a.o != nullptr) {
            float o = 0.0f;
#pragma unroll
            for (int w = 0; w < kRecWarps; ++w) o += part[1][w][lane];
            a.o[hv * a.dv + c] = o;
        }
        // The next token's k, q and partials are written only after every thread passed the
        // barrier above, when nobody reads this token's any more.
    }
#pragma unroll
    for (int m = 0; m < ROWS; ++m) {
        const int r = warp * ROWS + m;
        if (col_ok && r < a.dk) st[static_cast<int64_t>(r) * a.dv + c] = s[m];
    }
}

template <int ROWS>
void launch_recurrent(const RuleArgs& a, CUstream_st* stream) {
    const dim3 grid(static_cast<unsigned>(a.Hv),
                    static_cast<unsigned>((a.dv + kRecCols - 1) / kRecCols));
    recurrent_kernel<ROWS><<<grid, kRecWarps * 32, 0, stream>>>(a);
    DF_CUDA_CHECK_LAUNCH(recurrent_kernel<ROWS>);
}

// ---- gated norm
// ----------------------------------------------------------------------------------

constexpr int kNormWarps = 8;

// One warp per (token, head) row. The rounding steps follow HF's bf16 forward: the normalised
// row is cast to bf16, times w in bf16, then times silu(z) in f32 and cast.
__global__ void __launch_bounds__(kNormWarps * 32)
    gated_norm_kernel(const float* __restrict__ o, const uint16_t* __restrict__ z,
                      const uint16_t* __restrict__ w, float eps, uint16_t* __restrict__ y,
                      int64_t rows, int dv) {
    const int64_t row = static_cast<int64_t>(blockIdx.x) * kNormWarps + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= rows) return;
    const float* x = o + row * dv;
    float ss = 0.0f;
    for (int c = lane; c < dv; c += 32) ss += x[c] * x[c];
    const float inv = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(dv) + eps);
    for (int c = lane; c < dv; c += 32) {
        const float scaled = round_bf16(round_bf16(x[c] * inv) * bf(w[c]));
        y[row * dv + c] =
            static_cast<uint16_t>(f32_to_bf16_bits(scaled * silu(bf(z[row * dv + c]))));
    }
}

}  // namespace

void conv(const uint16_t* x, const uint16_t* w, const float* state, uint16_t* y, int64_t S, int C,
          int K, CUstream_st* stream) {
    if (S <= 0 || C <= 0) return;
    conv_kernel<<<grid_blocks(S * C), kThreads, 0, stream>>>(x, w, state, y, S, C, K);
    DF_CUDA_CHECK_LAUNCH(conv_kernel);
}

void conv_advance(float* state, const uint16_t* x, const int32_t* count, int64_t S, int C, int K,
                  CUstream_st* stream) {
    if (C <= 0) return;
    conv_advance_kernel<<<grid_blocks(C), kThreads, 0, stream>>>(state, x, count,
                                                                 static_cast<int>(S), C, K);
    DF_CUDA_CHECK_LAUNCH(conv_advance_kernel);
}

void prepare(const PrepareArgs& a, CUstream_st* stream) {
    if (a.S <= 0) return;
    prepare_kernel<<<static_cast<unsigned>(a.S), kPrepareWarps * 32, 0, stream>>>(a);
    DF_CUDA_CHECK_LAUNCH(prepare_kernel);
}

void recurrent(const RuleArgs& a, CUstream_st* stream) {
    if (a.S <= 0) return;
    const int rows = (a.dk + kRecWarps - 1) / kRecWarps;
    if (rows <= 4) {
        launch_recurrent<4>(a, stream);
    } else if (rows <= 8) {
        launch_recurrent<8>(a, stream);
    } else if (rows <= 16) {
        launch_recurrent<16>(a, stream);
    } else if (rows <= 32) {
        launch_recurrent<32>(a, stream);
    } else {
        launch_recurrent<64>(a, stream);
    }
}

void gated_norm(const float* o, const uint16_t* z, const uint16_t* w, float eps, uint16_t* y,
                int64_t rows, int dv, CUstream_st* stream) {
    if (rows <= 0) return;
    const auto blocks = static_cast<unsigned>((rows + kNormWarps - 1) / kNormWarps);
    gated_norm_kernel<<<blocks, kNormWarps * 32, 0, stream>>>(o, z, w, eps, y, rows, dv);
    DF_CUDA_CHECK_LAUNCH(gated_norm_kernel);
}

}  // namespace dflash::cuda::gdn

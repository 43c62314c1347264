// Row kernels of the chunked LM head + cross-entropy (the GEMMs run through cuBLASLt, see
// lm_head_ce.cpp): per-chunk statistics (online log-sum-exp, argmax, label logit, and the
// unnormalised probabilities of the flash-style dh), dh's final scaling, and the softmax-minus-
// one-hot gradient of a chunk for dw. One block per row, fixed reduction trees: deterministic.
// Tested by tests/cuda/lm_head_ce_cuda_test.cpp; the index arithmetic and the merge rule by
// tests/ops/row_stats_test.cpp.
#include "backend/cuda/kernels/lm_head_ce.h"

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/block_reduce.cuh"
#include "backend/cuda/kernels/row_stats.h"

namespace dflash::cuda {
namespace {

constexpr int kThreads = 256;
// A chunk row up to this many floats is kept in shared memory between the max sweep and the exp
// sweep (40 KB: with the static scratch still under the 48 KB a launch may take without opting
// in); longer rows are read from global memory (L2) twice.
constexpr int64_t kSmemRow = 10240;

__device__ __forceinline__ uint16_t bf16_bits(float x) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ float bf16_value(uint16_t b) {
    return __bfloat162float(__ushort_as_bfloat16(b));
}

// One element of the exp sweep: exp(x - new_max) into the sums and, with probs, the bf16 value
// stored (the label's column stored as 0 and left out of `rest`).
struct ExpSweep {
    float new_max;
    int64_t label_col;
    bool want_probs;
    float all = 0.0f, rest = 0.0f;

    __device__ uint16_t add(float x, int64_t c) {
        const float e = expf(x - new_max);
        all += e;
        if (c == label_col) return 0;
        if (!want_probs) {
            rest += e;
            return 0;
        }
        const uint16_t b = bf16_bits(e);
        rest +=
            bf16_value(b);  // what the dh GEMM multiplies, so acc - rest * w_label cancels exactly
        return b;
    }
};

__global__ void __launch_bounds__(kThreads) lm_stats_kernel(LmStatsArgs a, bool use_smem) {
    extern __shared__ float4 srow4[];  // float4: 16-byte aligned for the vector stores
    float* srow = reinterpret_cast<float*>(srow4);
    __shared__ BlockScratch<kThreads> sh;
    const int64_t r = blockIdx.x, n = a.n;
    const float* row = a.logits + r * n;
    const int64_t label_col = static_cast<int64_t>(a.labels[r]) - a.v0;
    // Read before any thread 0 write below (the reductions' barriers order them).
    const float old_max = a.first ? -INFINITY : a.st.row_max[r];
    const bool vec = n % 4 == 0;

    // Sweep 1: the chunk's max and its lowest index (global vocabulary index).
    float best = -INFINITY;
    int32_t best_i = INT32_MAX;
    const auto consider = [&](float x, int64_t c) {
        const int32_t i = static_cast<int32_t>(a.v0 + c);
        if (argmax_better(x, i, best, best_i)) best = x, best_i = i;
    };
    if (vec) {
        for (int64_t c = 4 * threadIdx.x; c < n; c += 4 * kThreads) {
            const float4 x = __ldg(reinterpret_cast<const float4*>(row + c));
            if (use_smem) *reinterpret_cast<float4*>(srow + c) = x;
            consider(x.x, c), consider(x.y, c + 1), consider(x.z, c + 2), consider(x.w, c + 3);
        }
    } else {
        for (int64_t c = threadIdx.x; c < n; c += kThreads) {
            const float x = __ldg(row + c);
            if (use_smem) srow[c] = x;
            consider(x, c);
        }
    }
    block_argmax<kThreads>(best, best_i, sh);
    const float new_max = a.first ? best : fmaxf(old_max, best);

    // Sweep 2 (same element-to-thread mapping, so each thread reads back only its own smem).
    ExpSweep sw{new_max, label_col, a.probs != nullptr};
    uint16_t* prow = a.probs ? a.probs + r * n : nullptr;
    const float* src = use_smem ? srow : row;
    if (vec) {
        for (int64_t c = 4 * threadIdx.x; c < n; c += 4 * kThreads) {
            const float4 x = *reinterpret_cast<const float4*>(src + c);
            const uint16_t b0 = sw.add(x.x, c), b1 = sw.add(x.y, c + 1);
            const uint16_t b2 = sw.add(x.z, c + 2), b3 = sw.add(x.w, c + 3);
            if (prow) {
                const uint2 packed{b0 | (uint32_t{b1} << 16), b2 | (uint32_t{b3} << 16)};
                *reinterpret_cast<uint2*>(prow + c) = packed;
            }
        }
    } else {
        for (int64_t c = threadIdx.x; c < n; c += kThreads) {
            const uint16_t b = sw.add(src[c], c);
            if (prow) prow[c] = b;
        }
    }
    const float chunk_sum = block_sum<kThreads>(sw.all, sh);
    const float chunk_rest = block_sum<kThreads>(sw.rest, sh);

    if (threadIdx.x == 0) {
        const LmRowState old{old_max, a.first ? 0.0f : a.st.row_sum[r],
                             a.first ? 0.0f : a.st.row_rest[r], a.first ? 0 : a.st.row_arg[r]};
        const LmRowState s =
            lm_merge_chunk(old, a.first, best, best_i, new_max, chunk_sum, chunk_rest);
        a.st.row_max[r] = s.max;
        a.st.row_sum[r] = s.sum;
        a.st.row_rest[r] = s.rest;
        a.st.row_arg[r] = s.arg;
        const bool has_label = label_col >= 0 && label_col < n;
        const float ll = has_label ? row[label_col] : (a.first ? 0.0f : a.st.label_logit[r]);
        a.st.label_logit[r] = ll;
        if (a.last) {
            const float lse = s.max + logf(s.sum);
            a.st.lse[r] = lse;
            if (a.loss_rows) a.loss_rows[r] = a.weights[r] == 0.0f ? 0.0f : lse - ll;
            if (a.argmax) a.argmax[r] = s.arg;
        }
    }
    // The dh accumulator holds sums relative to the old max: bring it to the new one (skipped
    // when the max did not grow, the common case after the first chunks).
    const float alpha = lm_rescale(a.first, old_max, new_max);
    if (a.dh_acc && !a.first && alpha != 1.0f) {
        float* acc = a.dh_acc + r * a.dim;
        for (int64_t j = threadIdx.x; j < a.dim; j += kThreads) acc[j] *= alpha;
    }
}

template <class TOut>
__global__ void __launch_bounds__(kThreads)
    lm_dh_kernel(const float* acc, const __nv_bfloat16* w, int64_t vocab, const int32_t* labels,
                 const float* weights, float grad_scale, const float* row_sum,
                 const float* row_rest, int64_t dim, TOut* dh) {
    const int64_t r = blockIdx.x;
    const float* a = acc + r * dim;
    TOut* out = dh + r * dim;
    const float coef = grad_scale * weights[r];
    const int32_t label = labels[r];
    // A label outside the vocabulary (only legal with weight 0) contributes no one-hot term.
    const __nv_bfloat16* wl = label >= 0 && label < vocab ? w + label * dim : nullptr;
    const float scale = coef == 0.0f ? 0.0f : coef / row_sum[r];
    const float rest = row_rest[r];
    for (int64_t j = threadIdx.x; j < dim; j += kThreads) {
        float v = 0.0f;
        if (coef != 0.0f) v = scale * (wl ? a[j] - rest * __bfloat162float(wl[j]) : a[j]);
        if constexpr (sizeof(TOut) == 2) {
            out[j] = __float2bfloat16_rn(v);
        } else {
            out[j] = v;
        }
    }
}

__global__ void __launch_bounds__(kThreads)
    lm_grad_kernel(const float* logits, int64_t n, int64_t v0, const int32_t* labels,
                   const float* weights, float grad_scale, const float* lse, uint16_t* g) {
    const int64_t r = blockIdx.x;
    const float* row = logits + r * n;
    uint16_t* out = g + r * n;
    const float coef = grad_scale * weights[r];
    const float l = lse[r];
    const int64_t label_col = static_cast<int64_t>(labels[r]) - v0;
    const auto grad = [&](float x, int64_t c) -> uint16_t {
        if (coef == 0.0f) return 0;
        return bf16_bits(coef * (expf(x - l) - (c == label_col ? 1.0f : 0.0f)));
    };
    if (n % 4 == 0) {
        for (int64_t c = 4 * threadIdx.x; c < n; c += 4 * kThreads) {
            const float4 x = __ldg(reinterpret_cast<const float4*>(row + c));
            const uint2 packed{grad(x.x, c) | (uint32_t{grad(x.y, c + 1)} << 16),
                               grad(x.z, c + 2) | (uint32_t{grad(x.w, c + 3)} << 16)};
            *reinterpret_cast<uint2*>(out + c) = packed;
        }
    } else {
        for (int64_t c = threadIdx.x; c < n; c += kThreads) out[c] = grad(__ldg(row + c), c);
    }
}

}  // namespace

void lm_stats_chunk(const LmStatsArgs& a, CUstream_st* stream) {
    if (a.rows <= 0 || a.n <= 0) return;
    const bool use_smem = a.n <= kSmemRow;
    const size_t smem = use_smem ? static_cast<size_t>(a.n) * sizeof(float) : 0;
    lm_stats_kernel<<<static_cast<unsigned>(a.rows), kThreads, smem, stream>>>(a, use_smem);
    DF_CUDA_CHECK_LAUNCH(lm_stats_kernel);
}

void lm_dh_finalize(const float* acc, const uint16_t* w, int64_t vocab, const int32_t* labels,
                    const float* weights, float grad_scale, const LmRowArrays& st, int64_t rows,
                    int64_t dim, void* dh, bool dh_bf16, CUstream_st* stream) {
    if (rows <= 0 || dim <= 0) return;
    const auto* wb = reinterpret_cast<const __nv_bfloat16*>(w);
    if (dh_bf16) {
        lm_dh_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
            acc, wb, vocab, labels, weights, grad_scale, st.row_sum, st.row_rest, dim,
            static_cast<__nv_bfloat16*>(dh));
        DF_CUDA_CHECK_LAUNCH(lm_dh_kernel<__nv_bfloat16>);
    } else {
        lm_dh_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
            acc, wb, vocab, labels, weights, grad_scale, st.row_sum, st.row_rest, dim,
            static_cast<float*>(dh));
        DF_CUDA_CHECK_LAUNCH(lm_dh_kernel<float>);
    }
}

void lm_grad_chunk(const float* logits, int64_t rows, int64_t n, int64_t v0, const int32_t* labels,
                   const float* weights, float grad_scale, const float* lse, uint16_t* g,
                   CUstream_st* stream) {
    if (rows <= 0 || n <= 0) return;
    lm_grad_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        logits, n, v0, labels, weights, grad_scale, lse, g);
    DF_CUDA_CHECK_LAUNCH(lm_grad_kernel);
}

}  // namespace dflash::cuda

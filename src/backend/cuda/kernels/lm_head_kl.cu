// Row kernels of the chunked LM head + KL distillation (the GEMMs run through cuBLASLt, see
// lm_head_kl.cpp and Note [Chunked KL] in backend/cpu/lm_head_kl.cpp): per-chunk statistics of
// both sides and the (q - p) gradient of a chunk. One block per row, fixed reduction trees:
// deterministic. Tested by tests/cuda/lm_head_kl_cuda_test.cpp.
#include "backend/cuda/kernels/lm_head_kl.h"

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/block_reduce.cuh"
#include "backend/cuda/kernels/row_stats.h"

namespace dflash::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) kl_stats_kernel(KlStatsArgs a) {
    __shared__ BlockScratch<kThreads> sh;
    const int64_t r = blockIdx.x, n = a.n;
    const float* drow = a.d + r * n;
    const float* trow = a.t + r * n;
    // Read before thread 0 writes them below (the reductions' barriers order the two).
    const float old_dmax = a.first ? -INFINITY : a.st.d_max[r];
    const float old_tmax = a.first ? -INFINITY : a.st.t_max[r];

    // Sweep 1: the chunk's draft max with its lowest global index, and the teacher's max.
    float best = -INFINITY, tbest = -INFINITY;
    int32_t best_i = INT32_MAX, tbest_i = 0;
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
        const float x = __ldg(drow + c);
        const int32_t i = static_cast<int32_t>(a.v0 + c);
        if (argmax_better(x, i, best, best_i)) best = x, best_i = i;
        tbest = fmaxf(tbest, __ldg(trow + c));
    }
    block_argmax<kThreads>(best, best_i, sh);
    block_argmax<kThreads>(tbest, tbest_i, sh);  // the index is not used: a block max
    const float new_dmax = a.first ? best : fmaxf(old_dmax, best);
    const float new_tmax = a.first ? tbest : fmaxf(old_tmax, tbest);

    // Sweep 2: the sums relative to the new maxima (the row is in L2 from sweep 1).
    float ds = 0.0f, ts = 0.0f, cs = 0.0f;
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
        const float x = __ldg(drow + c), y = __ldg(trow + c);
        ds += expf(x - new_dmax);
        const float e = expf(y - new_tmax);
        ts += e;
        cs += e * (y - x);
    }
    ds = block_sum<kThreads>(ds, sh);
    ts = block_sum<kThreads>(ts, sh);
    cs = block_sum<kThreads>(cs, sh);

    if (threadIdx.x != 0) return;
    const float ad = lm_rescale(a.first, old_dmax, new_dmax);
    const float at = lm_rescale(a.first, old_tmax, new_tmax);
    const float dsum = a.first ? ds : a.st.d_sum[r] * ad + ds;
    const float tsum = a.first ? ts : a.st.t_sum[r] * at + ts;
    const float cross = a.first ? cs : a.st.cross[r] * at + cs;
    const int32_t arg = (a.first || best > old_dmax) ? best_i : a.st.d_arg[r];
    a.st.d_max[r] = new_dmax;
    a.st.t_max[r] = new_tmax;
    a.st.d_sum[r] = dsum;
    a.st.t_sum[r] = tsum;
    a.st.cross[r] = cross;
    a.st.d_arg[r] = arg;
    if (!a.last) return;
    a.st.lse_d[r] = new_dmax + logf(dsum);
    a.st.lse_t[r] = new_tmax + logf(tsum);
    // KL = E_p[t - d] - lse_t + lse_d, written as a sum of terms that are each small when q ~ p
    // (no difference of two O(log V) numbers in f32).
    const float kl = cross / tsum + (new_dmax - new_tmax) + logf(dsum / tsum);
    if (a.loss_rows) a.loss_rows[r] = a.weights[r] == 0.0f ? 0.0f : kl;
    if (a.argmax) a.argmax[r] = arg;
}

__global__ void __launch_bounds__(kThreads)
    kl_grad_kernel(const float* d, const float* t, int64_t n, const float* weights,
                   float grad_scale, const float* lse_d, const float* lse_t, uint16_t* g) {
    const int64_t r = blockIdx.x;
    const float* drow = d + r * n;
    const float* trow = t + r * n;
    uint16_t* out = g + r * n;
    const float coef = grad_scale * weights[r];
    const float ld = lse_d[r], lt = lse_t[r];
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
        const float v =
            coef == 0.0f ? 0.0f : coef * (expf(__ldg(drow + c) - ld) - expf(__ldg(trow + c) - lt));
        out[c] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
}

}  // namespace

void kl_stats_chunk(const KlStatsArgs& a, CUstream_st* stream) {
    if (a.rows <= 0 || a.n <= 0) return;
    kl_stats_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
    DF_CUDA_CHECK_LAUNCH(kl_stats_kernel);
}

void kl_grad_chunk(const float* d, const float* t, int64_t rows, int64_t n, const float* weights,
                   float grad_scale, const KlRowArrays& st, uint16_t* g, CUstream_st* stream) {
    if (rows <= 0 || n <= 0) return;
    kl_grad_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        d, t, n, weights, grad_scale, st.lse_d, st.lse_t, g);
    DF_CUDA_CHECK_LAUNCH(kl_grad_kernel);
}

}  // namespace dflash::cuda

// Row kernels of the chunked LM head + distribution losses (the GEMMs run through cuBLASLt, see
// lm_head_kl.cpp and Note [Chunked divergences] in backend/cpu/lm_head_kl.cpp): per-chunk
// statistics of both sides, the mixed pass of JSD and TV, and the gradient of a chunk. One block
// per row, fixed reduction trees: deterministic. Tested by tests/cuda/lm_head_kl_cuda_test.cpp.
#include "backend/cuda/kernels/lm_head_kl.h"

#include <cuda_bf16.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/block_reduce.cuh"
#include "backend/cuda/kernels/row_stats.h"

namespace dflash::cuda {
namespace {

constexpr int kThreads = 256;

// log(2 a / (a + b)) for a = exp(la), b = exp(lb), from x = lb - la: exactly 0 at x = 0, no
// overflow (expm1 of a non-positive argument lies in [-1, 0]). As the CPU reference's.
__device__ __forceinline__ float log_ratio_to_mean(float x) {
    return x <= 0.0f ? -log1pf(0.5f * expm1f(x)) : -x - log1pf(0.5f * expm1f(-x));
}

// One vocabulary entry's two log-probabilities and probabilities. The mixed pass and the gradient
// both go through this one function, so their `q > p` tests agree on every entry.
struct Entry {
    float lq, lp, q, p;
};
__device__ __forceinline__ Entry entry(float d, float t, float lse_d, float lse_t) {
    Entry e;
    e.lq = d - lse_d;
    e.lp = t - lse_t;
    e.q = expf(e.lq);
    e.p = expf(e.lp);
    return e;
}

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
    float ds = 0.0f, ts = 0.0f, cps = 0.0f, cqs = 0.0f;
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
        const float x = __ldg(drow + c), y = __ldg(trow + c);
        const float ed = expf(x - new_dmax), et = expf(y - new_tmax);
        ds += ed;
        ts += et;
        cps += et * (y - x);
        cqs += ed * (x - y);
    }
    ds = block_sum<kThreads>(ds, sh);
    ts = block_sum<kThreads>(ts, sh);
    cps = block_sum<kThreads>(cps, sh);
    cqs = block_sum<kThreads>(cqs, sh);

    if (threadIdx.x != 0) return;
    const float ad = lm_rescale(a.first, old_dmax, new_dmax);
    const float at = lm_rescale(a.first, old_tmax, new_tmax);
    const float dsum = a.first ? ds : a.st.d_sum[r] * ad + ds;
    const float tsum = a.first ? ts : a.st.t_sum[r] * at + ts;
    const float cross_p = a.first ? cps : a.st.cross_p[r] * at + cps;
    const float cross_q = a.first ? cqs : a.st.cross_q[r] * ad + cqs;
    const int32_t arg = (a.first || best > old_dmax) ? best_i : a.st.d_arg[r];
    a.st.d_max[r] = new_dmax;
    a.st.t_max[r] = new_tmax;
    a.st.d_sum[r] = dsum;
    a.st.t_sum[r] = tsum;
    a.st.cross_p[r] = cross_p;
    a.st.cross_q[r] = cross_q;
    a.st.d_arg[r] = arg;
    if (!a.last) return;
    a.st.lse_d[r] = new_dmax + logf(dsum);
    a.st.lse_t[r] = new_tmax + logf(tsum);
    // KL(p || q) = E_p[t - d] - lse_t + lse_d and its mirror, each written as a sum of terms that
    // are small when q ~ p (no difference of two O(log V) numbers in f32).
    const float kl = cross_p / tsum + (new_dmax - new_tmax) + logf(dsum / tsum);
    const float rkl = cross_q / dsum + (new_tmax - new_dmax) + logf(tsum / dsum);
    a.st.kl[r] = kl;
    a.st.rkl[r] = rkl;
    const bool mixed = a.mix.jsd != 0.0f || a.mix.tv != 0.0f;
    if (a.loss_rows && !mixed)
        a.loss_rows[r] = a.weights[r] == 0.0f ? 0.0f : a.mix.kl * kl + a.mix.rkl * rkl;
    if (a.argmax) a.argmax[r] = arg;
}

__global__ void __launch_bounds__(kThreads) kl_mixed_kernel(KlStatsArgs a) {
    __shared__ BlockScratch<kThreads> sh;
    const int64_t r = blockIdx.x, n = a.n;
    const float* drow = a.d + r * n;
    const float* trow = a.t + r * n;
    const float ld = a.st.lse_d[r], lt = a.st.lse_t[r];
    float jsd = 0.0f, kl_qm = 0.0f, tv = 0.0f, u = 0.0f;
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
        const Entry e = entry(__ldg(drow + c), __ldg(trow + c), ld, lt);
        const float lqm = log_ratio_to_mean(e.lp - e.lq), lpm = log_ratio_to_mean(e.lq - e.lp);
        jsd += 0.5f * (e.p * lpm + e.q * lqm);
        kl_qm += e.q * lqm;
        tv += 0.5f * fabsf(e.p - e.q);
        if (e.q > e.p) u += e.q;
    }
    jsd = block_sum<kThreads>(jsd, sh);
    kl_qm = block_sum<kThreads>(kl_qm, sh);
    tv = block_sum<kThreads>(tv, sh);
    u = block_sum<kThreads>(u, sh);
    if (threadIdx.x != 0) return;
    if (!a.first) {
        jsd += a.st.jsd[r];
        kl_qm += a.st.kl_qm[r];
        tv += a.st.tv[r];
        u += a.st.u[r];
    }
    a.st.jsd[r] = jsd;
    a.st.kl_qm[r] = kl_qm;
    a.st.tv[r] = tv;
    a.st.u[r] = u;
    if (a.last && a.loss_rows) {
        const float loss =
            a.mix.kl * a.st.kl[r] + a.mix.rkl * a.st.rkl[r] + a.mix.jsd * jsd + a.mix.tv * tv;
        a.loss_rows[r] = a.weights[r] == 0.0f ? 0.0f : loss;
    }
}

__global__ void __launch_bounds__(kThreads)
    kl_grad_kernel(const float* d, const float* t, int64_t n, const float* weights,
                   float grad_scale, KlMix mix, KlRowArrays st, uint16_t* g) {
    const int64_t r = blockIdx.x;
    const float* drow = d + r * n;
    const float* trow = t + r * n;
    uint16_t* out = g + r * n;
    const float coef = grad_scale * weights[r];
    const float ld = st.lse_d[r], lt = st.lse_t[r];
    // The row scalars the closed forms need (only read when their term is in the mix: the mixed
    // pass's arrays are not written otherwise).
    const float rkl = mix.rkl != 0.0f ? st.rkl[r] : 0.0f;
    const float kl_qm = mix.jsd != 0.0f ? st.kl_qm[r] : 0.0f;
    const float u = mix.tv != 0.0f ? st.u[r] : 0.0f;
    for (int64_t c = threadIdx.x; c < n; c += kThreads) {
        float v = 0.0f;
        if (coef != 0.0f) {
            const Entry e = entry(__ldg(drow + c), __ldg(trow + c), ld, lt);
            float s = 0.0f;
            if (mix.kl != 0.0f) s += mix.kl * (e.q - e.p);
            if (mix.rkl != 0.0f) s += mix.rkl * e.q * (e.lq - e.lp - rkl);
            if (mix.jsd != 0.0f)
                s += mix.jsd * 0.5f * e.q * (log_ratio_to_mean(e.lp - e.lq) - kl_qm);
            if (mix.tv != 0.0f) s += mix.tv * e.q * ((e.q > e.p ? 1.0f : 0.0f) - u);
            v = coef * s;
        }
        out[c] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
    }
}

}  // namespace

void kl_stats_chunk(const KlStatsArgs& a, CUstream_st* stream) {
    if (a.rows <= 0 || a.n <= 0) return;
    kl_stats_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
    DF_CUDA_CHECK_LAUNCH(kl_stats_kernel);
}

void kl_mixed_chunk(const KlStatsArgs& a, CUstream_st* stream) {
    if (a.rows <= 0 || a.n <= 0) return;
    kl_mixed_kernel<<<static_cast<unsigned>(a.rows), kThreads, 0, stream>>>(a);
    DF_CUDA_CHECK_LAUNCH(kl_mixed_kernel);
}

void kl_grad_chunk(const float* d, const float* t, int64_t rows, int64_t n, const float* weights,
                   float grad_scale, const KlMix& mix, const KlRowArrays& st, uint16_t* g,
                   CUstream_st* stream) {
    if (rows <= 0 || n <= 0) return;
    kl_grad_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(d, t, n, weights,
                                                                         grad_scale, mix, st, g);
    DF_CUDA_CHECK_LAUNCH(kl_grad_kernel);
}

}  // namespace dflash::cuda

// Mixture-of-experts kernels (kernels/moe.h): the router's top-k and weights and the weighted
// gather that sums each token's k expert outputs; moe_experts strings them together with the
// counting sort and the grouped GEMMs of moe_grouped.cu. No host
// synchronisation anywhere (the whole op records into a CUDA graph) and no floating-point
// atomics: every sum has one fixed order. Tested by tests/cuda/moe_cuda_test.cpp.
//
// moe_experts, for n = R * k pairs p = r * k + j:
//   1. sort: one block counts the pairs per expert and gives each a sorted position, stable (in
//      pair order within an expert), so the layout is a function of the ids alone;
//   2. grouped GEMM 1: act[s] = act(gate_up_e · x[token(s)] + b) for every sorted position s;
//   3. grouped GEMM 2: y[s] = down_e · act[s] + b;
//   4. gather: out[r] = sum_j weights[r, j] * y[slot[r * k + j]], j ascending, in fp32.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/moe.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::moe {
namespace {

// ---- routing
// -------------------------------------------------------------------------------------

// Whether (v, i) comes before (bv, bi) in the router's order: logit descending, id ascending; bi
// < 0 is "nothing yet".
__device__ __forceinline__ bool before(float v, int i, float bv, int bi) {
    return bi < 0 || v > bv || (v == bv && i < bi);
}

constexpr int kRouteWarps = 4;

// One warp per row. Pick j is the best element strictly after pick j - 1 in the order (no set of
// taken ids needed); the warp's best is exact whatever the shuffle order.
__global__ void __launch_bounds__(kRouteWarps * 32)
    route_kernel(const float* __restrict__ logits, int rows, int experts, int k, int kind,
                 bool normalize, int32_t* __restrict__ ids, float* __restrict__ weights) {
    const int row = blockIdx.x * kRouteWarps + (threadIdx.x >> 5);
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const float* l = logits + static_cast<int64_t>(row) * experts;
    float picked[kMaxK];
    int prev_i = -1;
    float prev_v = 0.0f;
    for (int j = 0; j < k; ++j) {
        float bv = 0.0f;
        int bi = -1;
        for (int e = lane; e < experts; e += 32) {
            const float v = l[e];
            const bool after_prev = prev_i < 0 || v < prev_v || (v == prev_v && e > prev_i);
            if (after_prev && before(v, e, bv, bi)) {
                bv = v;
                bi = e;
            }
        }
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi >= 0 && before(ov, oi, bv, bi)) {
                bv = ov;
                bi = oi;
            }
        }
        picked[j] = bv;
        prev_v = bv;
        prev_i = bi;
        if (lane == 0) ids[static_cast<int64_t>(row) * k + j] = bi;
    }
    const float top = picked[0];
    float denom = 0.0f;
    if (kind == kSoftmaxTopk) {
        // The softmax over every expert: lane partial sums in a fixed order, then a fixed tree.
        for (int e = lane; e < experts; e += 32) denom += expf(l[e] - top);
        for (int o = 16; o > 0; o >>= 1) denom += __shfl_xor_sync(0xffffffffu, denom, o);
    } else {
        for (int j = 0; j < k; ++j) denom += expf(picked[j] - top);
    }
    if (lane != 0) return;
    float* w = weights + static_cast<int64_t>(row) * k;
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) {
        w[j] = expf(picked[j] - top) / denom;
        sum += w[j];
    }
    if (kind == kSoftmaxTopk && normalize) {
        for (int j = 0; j < k; ++j) w[j] /= sum;
    }
}

// ---- the weighted gather
// -------------------------------------------------------------------------

// out[r, c..c+VEC) = sum_j weights[r, j] * y[slot[r, j], c..), j ascending; a pair without a slot
// adds nothing.
template <int VEC>
__global__ void gather_kernel(const uint16_t* __restrict__ y, const int32_t* __restrict__ slot,
                              const float* __restrict__ weights, int rows, int dim, int k,
                              uint16_t* __restrict__ out) {
    const int64_t per_row = dim / VEC;
    const int64_t items = static_cast<int64_t>(rows) * per_row;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
         i += stride) {
        const int64_t r = i / per_row;
        const int64_t c = (i - r * per_row) * VEC;
        float acc[VEC];
#pragma unroll
        for (int v = 0; v < VEC; ++v) acc[v] = 0.0f;
        for (int j = 0; j < k; ++j) {
            const int32_t s = slot[r * k + j];
            if (s < 0) continue;
            const float w = weights[r * k + j];
            float t[VEC];
            kernels::load_vec<VEC>(y + static_cast<int64_t>(s) * dim + c, t);
#pragma unroll
            for (int v = 0; v < VEC; ++v) acc[v] += w * t[v];
        }
        kernels::store_vec<VEC>(out + r * dim + c, acc);
    }
}

size_t round_up(size_t b) {
    return (b + 255) / 256 * 256;
}

}  // namespace

void route(const float* logits, int rows, int experts, int k, int kind, bool normalize,
           int32_t* ids, float* weights, CUstream_st* stream) {
    if (rows <= 0) return;
    route_kernel<<<cdiv(rows, kRouteWarps), kRouteWarps * 32, 0, stream>>>(
        logits, rows, experts, k, kind, normalize, ids, weights);
    DF_CUDA_CHECK_LAUNCH(moe_route_kernel);
}

size_t experts_scratch_bytes(int64_t pairs, int64_t experts, int64_t inter, int64_t dim) {
    const auto n = static_cast<size_t>(pairs);
    return 2 * round_up(sizeof(int32_t) * static_cast<size_t>(experts + 1)) +
           2 * round_up(sizeof(int32_t) * n) + round_up(2 * n * static_cast<size_t>(inter)) +
           round_up(2 * n * static_cast<size_t>(dim));
}

ExpertsScratch carve_experts_scratch(void* base, int64_t pairs, int64_t experts, int64_t inter,
                                     int64_t dim) {
    const auto n = static_cast<size_t>(pairs);
    auto* p = static_cast<char*>(base);
    const auto take = [&](size_t bytes) {
        char* q = p;
        p += round_up(bytes);
        return q;
    };
    ExpertsScratch s;
    s.offsets = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * (experts + 1)));
    s.tile_offsets = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * (experts + 1)));
    s.sorted_pair = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * n));
    s.slot = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * n));
    s.act = reinterpret_cast<uint16_t*>(take(2 * n * static_cast<size_t>(inter)));
    s.y = reinterpret_cast<uint16_t*>(take(2 * n * static_cast<size_t>(dim)));
    return s;
}

void experts(const ExpertsArgs& a, const ExpertsScratch& s, CUstream_st* stream) {
    if (a.rows <= 0) return;
    const int n = a.rows * a.k;
    sort_pairs(a.ids, n, a.experts, s, stream);

    GroupedGemmArgs g;
    g.offsets = s.offsets;
    g.tile_offsets = s.tile_offsets;
    g.experts = a.experts;
    g.pairs = n;
    g.a = a.x;
    g.sorted_pair = s.sorted_pair;
    g.k_per_row = a.k;
    g.w = a.gate_up;
    g.w_blocks = a.gate_up_blocks;
    g.w_scales = a.gate_up_scales;
    g.bias = a.gate_up_bias;
    g.kdim = a.dim;
    g.n = a.inter;
    g.out = s.act;
    g.activation = a.activation;
    g.limit = a.limit;
    g.alpha = a.alpha;
    grouped_gemm(g, stream);

    g.a = s.act;
    g.sorted_pair = nullptr;
    g.k_per_row = 1;
    g.w = a.down;
    g.w_blocks = a.down_blocks;
    g.w_scales = a.down_scales;
    g.bias = a.down_bias;
    g.kdim = a.inter;
    g.n = a.dim;
    g.out = s.y;
    g.activation = kNone;
    grouped_gemm(g, stream);

    const int64_t items = static_cast<int64_t>(a.rows) * a.dim;
    if (a.dim % 8 == 0 && kernels::aligned16(a.out)) {
        gather_kernel<8><<<kernels::grid_blocks(items / 8), kernels::kThreads, 0, stream>>>(
            s.y, s.slot, a.weights, a.rows, a.dim, a.k, a.out);
        DF_CUDA_CHECK_LAUNCH(moe_gather_kernel_vec);
    } else {
        gather_kernel<1><<<kernels::grid_blocks(items), kernels::kThreads, 0, stream>>>(
            s.y, s.slot, a.weights, a.rows, a.dim, a.k, a.out);
        DF_CUDA_CHECK_LAUNCH(moe_gather_kernel_scalar);
    }
}

}  // namespace dflash::cuda::moe

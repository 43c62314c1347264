// DSpark's rnn Markov head recurrence: one thread block per block of slots (the recurrence is
// sequential in the slots, independent across blocks), the 3r pre-activations or the r state
// channels spread over the threads, the slot's vectors in shared memory between two barriers.
// Sums in the CPU reference's order (the state dot over c, the state gradient over i), so the
// two differ by bf16 inputs, the rounding of expf/tanhf and the bf16 outputs only. j's state
// columns are re-read at every slot (3r x r bf16, from L2): at r = 256, 512 blocks of 7 slots
// read ~1.4 GB in all, ~1 ms on an H200; a tiled version can come when a profile asks.
// The backward recomputes each state from slot 0 (O(bs^2) element-wise work per channel, no
// storage), as dpace_weights does. dbias is a second kernel: one thread per column, rows in
// order (deterministic). Tested by tests/cuda/markov_rnn_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/grid_stride.cuh"
#include "backend/cuda/kernels/markov_rnn.h"
#include "backend/cuda/kernels/sigmoid.cuh"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

constexpr int kRnnThreads = 256;

__device__ __forceinline__ float ld(const uint16_t* p, int64_t i) {
    return bf16_bits_to_f32(p[i]);
}
__device__ __forceinline__ uint16_t st(float x) {
    return static_cast<uint16_t>(f32_to_bf16_bits(x));
}

// Shared memory: the state (r floats) then the slot's pre-activations (3r floats).
__global__ void __launch_bounds__(kRnnThreads)
    markov_rnn_fwd_kernel(const uint16_t* __restrict__ pre, const uint16_t* __restrict__ bias,
                          const uint16_t* __restrict__ j, float* __restrict__ act,
                          uint16_t* __restrict__ out, MarkovRnnShape s) {
    extern __shared__ float smem[];
    float* state = smem;
    float* a = smem + s.r;
    const int64_t A = 3 * s.r;
    for (int64_t c = threadIdx.x; c < s.r; c += blockDim.x) state[c] = 0.0f;
    __syncthreads();
    for (int64_t k = 0; k < s.bs; ++k) {
        const int64_t row = static_cast<int64_t>(blockIdx.x) * s.bs + k;
        for (int64_t i = threadIdx.x; i < A; i += blockDim.x) {
            float acc = 0.0f;
            for (int64_t c = 0; c < s.r; ++c)
                acc = __fadd_rn(acc, __fmul_rn(ld(j, i * s.C + c), state[c]));
            const float v = __fadd_rn(__fadd_rn(ld(pre, row * A + i), ld(bias, i)), acc);
            a[i] = v;
            act[row * A + i] = v;
        }
        __syncthreads();
        for (int64_t c = threadIdx.x; c < s.r; c += blockDim.x) {
            const float g = sigmoid(a[c]);
            state[c] =
                __fadd_rn(__fmul_rn(g, state[c]), __fmul_rn(__fsub_rn(1.0f, g), tanhf(a[s.r + c])));
            out[row * s.r + c] = st(tanhf(a[2 * s.r + c]));
        }
        __syncthreads();
    }
}

// The state before slot k of the block starting at row0, channel c, recomputed from slot 0.
__device__ float state_before(const float* act, int64_t row0, int64_t k, int64_t c, int64_t r) {
    float sv = 0.0f;
    for (int64_t t = 0; t < k; ++t) {
        const float* a = act + (row0 + t) * 3 * r;
        const float g = sigmoid(a[c]);
        sv = __fadd_rn(__fmul_rn(g, sv), __fmul_rn(__fsub_rn(1.0f, g), tanhf(a[r + c])));
    }
    return sv;
}

// Shared memory: the state's gradient ds (r floats) then the slot's dact (3r floats).
__global__ void __launch_bounds__(kRnnThreads)
    markov_rnn_bwd_kernel(const uint16_t* __restrict__ dout, const float* __restrict__ act,
                          const uint16_t* __restrict__ j, uint16_t* __restrict__ dact,
                          uint16_t* __restrict__ s_prev, MarkovRnnShape s) {
    extern __shared__ float smem[];
    float* ds = smem;
    float* da = smem + s.r;
    const int64_t A = 3 * s.r, r = s.r;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * s.bs;
    for (int64_t c = threadIdx.x; c < r; c += blockDim.x) ds[c] = 0.0f;
    __syncthreads();
    for (int64_t k = s.bs - 1; k >= 0; --k) {
        const int64_t row = row0 + k;
        const float* a = act + row * A;
        for (int64_t c = threadIdx.x; c < r; c += blockDim.x) {
            const float sp = state_before(act, row0, k, c, r);
            s_prev[row * r + c] = st(sp);
            const float g = sigmoid(a[c]);
            const float cand = tanhf(a[r + c]);
            const float o = tanhf(a[2 * r + c]);
            const float dsk = ds[c];
            const float one_g = __fsub_rn(1.0f, g);
            const float dg = __fmul_rn(__fmul_rn(__fmul_rn(dsk, __fsub_rn(sp, cand)), g), one_g);
            const float dc =
                __fmul_rn(__fmul_rn(dsk, one_g), __fsub_rn(1.0f, __fmul_rn(cand, cand)));
            const float dout_c = ld(dout, row * r + c);
            const float dov = __fmul_rn(dout_c, __fsub_rn(1.0f, __fmul_rn(o, o)));
            da[c] = dg;
            da[r + c] = dc;
            da[2 * r + c] = dov;
            dact[row * A + c] = st(dg);
            dact[row * A + r + c] = st(dc);
            dact[row * A + 2 * r + c] = st(dov);
        }
        __syncthreads();
        // ds_{k-1}[c] = ds_k[c] g[c] + sum_i j[i, c] da[i]: each thread reads its own ds[c]
        // before writing it, and all da are in place, so one barrier after suffices.
        for (int64_t c = threadIdx.x; c < r; c += blockDim.x) {
            float acc = __fmul_rn(ds[c], sigmoid(a[c]));
            for (int64_t i = 0; i < A; ++i)
                acc = __fadd_rn(acc, __fmul_rn(ld(j, i * s.C + c), da[i]));
            ds[c] = acc;
        }
        __syncthreads();
    }
}

__global__ void markov_rnn_dbias_kernel(const uint16_t* __restrict__ dact,
                                        float* __restrict__ dbias, MarkovRnnShape s) {
    const int64_t A = 3 * s.r;
    for_each_index(A, [&](int64_t i) {
        float acc = 0.0f;
        for (int64_t row = 0; row < s.R; ++row) acc = __fadd_rn(acc, ld(dact, row * A + i));
        dbias[i] = __fadd_rn(dbias[i], acc);
    });
}

size_t smem_bytes(const MarkovRnnShape& s) {
    return static_cast<size_t>(4 * s.r) * sizeof(float);
}

}  // namespace

void markov_rnn_fwd(const uint16_t* pre, const uint16_t* bias, const uint16_t* j, float* act,
                    uint16_t* out, const MarkovRnnShape& s, CUstream_st* stream) {
    const int64_t blocks = s.R / s.bs;
    if (blocks == 0) return;
    markov_rnn_fwd_kernel<<<static_cast<unsigned>(blocks), kRnnThreads, smem_bytes(s), stream>>>(
        pre, bias, j, act, out, s);
    DF_CUDA_CHECK_LAUNCH(markov_rnn_fwd_kernel);
}

void markov_rnn_bwd(const uint16_t* dout, const float* act, const uint16_t* j, uint16_t* dact,
                    float* dbias, uint16_t* s_prev, const MarkovRnnShape& s, CUstream_st* stream) {
    const int64_t blocks = s.R / s.bs;
    if (blocks == 0) return;
    markov_rnn_bwd_kernel<<<static_cast<unsigned>(blocks), kRnnThreads, smem_bytes(s), stream>>>(
        dout, act, j, dact, s_prev, s);
    DF_CUDA_CHECK_LAUNCH(markov_rnn_bwd_kernel);
    const auto grid = static_cast<unsigned>((3 * s.r + kRnnThreads - 1) / kRnnThreads);
    markov_rnn_dbias_kernel<<<grid, kRnnThreads, 0, stream>>>(dact, dbias, s);
    DF_CUDA_CHECK_LAUNCH(markov_rnn_dbias_kernel);
}

}  // namespace dflash::cuda::kernels

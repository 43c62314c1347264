// Gating kernels: bf16 in and out, fp32 math in the CPU reference's operation order (explicitly
// rounded operations, precise expf), so the two differ only by expf's error before the bf16
// rounding (and, for sigmoid_mul_bwd's column sums, by the summation order). Tested by
// tests/cuda/gating_cuda_test.cpp.
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/gating.h"
#include "backend/cuda/kernels/sigmoid.cuh"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

// No __restrict__ on x and y: y may alias x (each element is read before it is written).
template <int VEC>
__global__ void sigmoid_mul_kernel(const uint16_t* x, const uint16_t* __restrict__ gate,
                                   uint16_t* y, int64_t n) {
    grid_stride_vec<VEC>(n, [&]<int N>(int64_t i) {
        float a[N], g[N], o[N];
        load_vec<N>(x + i, a);
        load_vec<N>(gate + i, g);
#pragma unroll
        for (int j = 0; j < N; ++j) o[j] = __fmul_rn(a[j], sigmoid(g[j]));
        store_vec<N>(y + i, o);
    });
}

// One thread per element; the row's gate is recomputed per element (cheap next to the load).
__global__ void add_sigmoid_scaled_kernel(uint16_t* __restrict__ y, const uint16_t* __restrict__ x,
                                          const float* __restrict__ s, int64_t rows, int64_t cols) {
    const int64_t n = rows * cols;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float gate = sigmoid(s[i / cols]);
        const float v = __fadd_rn(bf16_bits_to_f32(y[i]), __fmul_rn(gate, bf16_bits_to_f32(x[i])));
        y[i] = static_cast<uint16_t>(f32_to_bf16_bits(v));
    }
}

// sigmoid_mul_bwd: blocks of 32 columns x 8 row lanes over one chunk of kBwdChunkRows rows; a
// thread walks its column down the chunk's rows 8 apart (coalesced across the warp's 32 columns),
// the 8 lanes' sums are added in lane order in shared memory, and the chunk's sum is its partial.
constexpr int kBwdCols = 32, kBwdLanes = 8;
constexpr int64_t kBwdChunkRows = 64;

__global__ void __launch_bounds__(kBwdCols* kBwdLanes)
    sigmoid_mul_bwd_kernel(const uint16_t* __restrict__ dy, const uint16_t* __restrict__ x,
                           const uint16_t* __restrict__ gate, uint16_t* __restrict__ dx,
                           uint16_t* __restrict__ dgate, float* __restrict__ partial, int64_t rows,
                           int64_t cols) {
    __shared__ float lanes[kBwdLanes][kBwdCols];
    const int64_t c = static_cast<int64_t>(blockIdx.x) * kBwdCols + threadIdx.x;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kBwdChunkRows;
    const int64_t r1 = r0 + kBwdChunkRows < rows ? r0 + kBwdChunkRows : rows;
    float acc = 0.0f;
    if (c < cols) {
        for (int64_t r = r0 + threadIdx.y; r < r1; r += kBwdLanes) {
            const int64_t i = r * cols + c;
            const float s = sigmoid(bf16_bits_to_f32(gate[i]));
            const float d = bf16_bits_to_f32(dy[i]);
            const float v = __fadd_rn(bf16_bits_to_f32(dx[i]), __fmul_rn(d, s));
            dx[i] = static_cast<uint16_t>(f32_to_bf16_bits(v));
            const float g =
                __fmul_rn(__fmul_rn(d, bf16_bits_to_f32(x[i])), __fmul_rn(s, __fsub_rn(1.0f, s)));
            dgate[i] = static_cast<uint16_t>(f32_to_bf16_bits(g));
            acc = __fadd_rn(acc, g);
        }
    }
    if (partial == nullptr) return;
    lanes[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < cols) {
        float t = lanes[0][threadIdx.x];
        for (int l = 1; l < kBwdLanes; ++l) t = __fadd_rn(t, lanes[l][threadIdx.x]);
        partial[static_cast<int64_t>(blockIdx.y) * cols + c] = t;
    }
}

// sum[c] += the chunks' partials of column c, in chunk order.
__global__ void column_partials_kernel(const float* __restrict__ partial, float* __restrict__ sum,
                                       int64_t chunks, int64_t cols) {
    const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (c >= cols) return;
    float t = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) t = __fadd_rn(t, partial[k * cols + c]);
    sum[c] = __fadd_rn(sum[c], t);
}

}  // namespace

int64_t sigmoid_mul_bwd_chunks(int64_t rows) {
    return (rows + kBwdChunkRows - 1) / kBwdChunkRows;
}

void sigmoid_mul_bwd(const uint16_t* dy, const uint16_t* x, const uint16_t* gate, uint16_t* dx,
                     uint16_t* dgate, float* partial, float* sum, int64_t rows, int64_t cols,
                     CUstream_st* stream) {
    if (rows <= 0 || cols <= 0) return;
    const int64_t chunks = sigmoid_mul_bwd_chunks(rows);
    const dim3 grid(static_cast<unsigned>((cols + kBwdCols - 1) / kBwdCols),
                    static_cast<unsigned>(chunks));
    sigmoid_mul_bwd_kernel<<<grid, dim3(kBwdCols, kBwdLanes), 0, stream>>>(
        dy, x, gate, dx, dgate, sum != nullptr ? partial : nullptr, rows, cols);
    DF_CUDA_CHECK_LAUNCH(sigmoid_mul_bwd_kernel);
    if (sum == nullptr) return;
    column_partials_kernel<<<grid_blocks(cols), kThreads, 0, stream>>>(partial, sum, chunks, cols);
    DF_CUDA_CHECK_LAUNCH(column_partials_kernel);
}

void sigmoid_mul(const uint16_t* x, const uint16_t* gate, uint16_t* y, int64_t n,
                 CUstream_st* stream) {
    if (n <= 0) return;
    if (aligned16(x) && aligned16(gate) && aligned16(y)) {
        sigmoid_mul_kernel<8><<<grid_blocks(n / 8 + 1), kThreads, 0, stream>>>(x, gate, y, n);
        DF_CUDA_CHECK_LAUNCH(sigmoid_mul_kernel_vec);
    } else {
        sigmoid_mul_kernel<1><<<grid_blocks(n), kThreads, 0, stream>>>(x, gate, y, n);
        DF_CUDA_CHECK_LAUNCH(sigmoid_mul_kernel_scalar);
    }
}

void add_sigmoid_scaled(uint16_t* y, const uint16_t* x, const float* s, int64_t rows, int64_t cols,
                        CUstream_st* stream) {
    if (rows <= 0 || cols <= 0) return;
    add_sigmoid_scaled_kernel<<<grid_blocks(rows * cols), kThreads, 0, stream>>>(y, x, s, rows,
                                                                                 cols);
    DF_CUDA_CHECK_LAUNCH(add_sigmoid_scaled_kernel);
}

}  // namespace dflash::cuda::kernels

// RMSNorm kernels. A row of C values is handled by a group of `tpr` threads (a power of two): up to
// 32 groups share a 256-thread block for short rows (per-head q/k norm, C = 64 or 128: 8 or 16
// threads per row), one block per row for long ones (C up to 8192). Each thread keeps its part of
// the row in registers (MAXV vectors of VEC values, 16-byte loads where the row allows), so x and
// dy are read from memory once. The backward's dw is summed per block in registers (then across
// the block's groups through shared memory, in group order) into one partial row per block; a
// second kernel adds the partials in block order. Nothing depends on timing: same bits every run.
// Tested by tests/cuda/rmsnorm_cuda_test.cpp.
#include <initializer_list>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/rmsnorm.h"
#include "backend/cuda/kernels/rmsnorm_geometry.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

constexpr int kBlock = kRmsNormBlock;
constexpr int kReduceSlices = 16;  // row slices per column in the dw reduction

bool vec_ok(int64_t cols, std::initializer_list<const void*> ptrs) {
    if (cols % 8 != 0) return false;
    for (const void* p : ptrs)
        if (!aligned16(p)) return false;
    return true;
}

// Sum over the row's group: shuffles within a warp, the block when one row fills it.
__device__ __forceinline__ float row_sum(float v, int tpr, float* red) {
    return tpr <= 32 ? group_sum(v, tpr) : block_sum(v, red);
}

// W: the weight's element type, uint16_t (bf16) or float (the hybrid families' (1 + w) scales,
// kept in f32 so that y is rounded once, as transformers rounds it).
template <class W, int VEC, int MAXV>
__global__ void __launch_bounds__(kBlock)
    rmsnorm_fwd_kernel(const uint16_t* x, const W* __restrict__ w, uint16_t* y,
                       float* __restrict__ rstd, int64_t rows, int cols, int tpr, float eps) {
    __shared__ float red[32];
    pdl::wait();  // x comes from the kernel before this one (a no-op without the attribute)
    pdl::launch_dependents();
    const int rpb = blockDim.x / tpr;
    const int lane = threadIdx.x % tpr;
    const int64_t row = static_cast<int64_t>(blockIdx.x) * rpb + threadIdx.x / tpr;
    const bool active = row < rows;
    const int nvec = cols / VEC;
    const int64_t base = row * cols;
    float xv[MAXV][VEC];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < MAXV; ++k) {
        const int v = lane + k * tpr;
        if (active && v < nvec) {
            load_vec<VEC>(x + base + v * VEC, xv[k]);
#pragma unroll
            for (int j = 0; j < VEC; ++j) ss = fmaf(xv[k][j], xv[k][j], ss);
        }
    }
    ss = row_sum(ss, tpr, red);
    // The CPU reference's scalar steps, in double (one per row: cheap).
    const float s = static_cast<float>(1.0 / sqrt(static_cast<double>(ss) / cols + eps));
    if (!active) return;
#pragma unroll
    for (int k = 0; k < MAXV; ++k) {
        const int v = lane + k * tpr;
        if (v < nvec) {
            float wv[VEC], o[VEC];
            load_vec<VEC>(w + v * VEC, wv);
#pragma unroll
            for (int j = 0; j < VEC; ++j) o[j] = wv[j] * (xv[k][j] * s);  // HF order
            store_vec<VEC>(y + base + v * VEC, o);
        }
    }
    if (rstd != nullptr && lane == 0) rstd[row] = s;
}

// dx_j = r (w_j dy_j - x_j r^2 / C sum_i dy_i w_i x_i); block b's partial[b, i] = sum over its
// rows of dy_i x_i r. Block b owns rows [first(b), first(b + 1)) (rmsnorm_geometry.h), `rpb` at a
// time. dx may alias
// dy or x (as y may alias x in the forward): a row is in registers before any of it is written,
// hence no __restrict__ on them.
template <int VEC, int MAXV>
__global__ void __launch_bounds__(kBlock)
    rmsnorm_bwd_kernel(const uint16_t* dy, const uint16_t* x, const uint16_t* __restrict__ w,
                       const float* __restrict__ rstd, uint16_t* dx, float* __restrict__ partial,
                       int64_t rows, int cols, int tpr, int64_t blocks) {
    extern __shared__ float4 stage4[];  // [rpb][cols] floats when rpb > 1
    __shared__ float red[32];
    float* stage = reinterpret_cast<float*>(stage4);
    const int rpb = blockDim.x / tpr;
    const int grp = threadIdx.x / tpr;
    const int lane = threadIdx.x % tpr;
    const int nvec = cols / VEC;
    const int64_t r0 = rmsnorm_bwd_first_row(blockIdx.x, rows, blocks);
    const int64_t r1 = rmsnorm_bwd_first_row(blockIdx.x + 1, rows, blocks);
    const double inv_c = 1.0 / cols;
    float dwa[MAXV][VEC];
#pragma unroll
    for (int k = 0; k < MAXV; ++k)
#pragma unroll
        for (int j = 0; j < VEC; ++j) dwa[k][j] = 0.0f;

    for (int64_t first = r0; first < r1; first += rpb) {  // uniform trip count: shuffles and
        const int64_t r = first + grp;                    // barriers see every thread
        const bool active = r < r1;
        const int64_t base = r * cols;
        float xv[MAXV][VEC], gv[MAXV][VEC];
        float dot = 0.0f;
#pragma unroll
        for (int k = 0; k < MAXV; ++k) {
            const int v = lane + k * tpr;
            if (active && v < nvec) {
                float wv[VEC];
                load_vec<VEC>(x + base + v * VEC, xv[k]);
                load_vec<VEC>(dy + base + v * VEC, gv[k]);
                load_vec<VEC>(w + v * VEC, wv);
#pragma unroll
                for (int j = 0; j < VEC; ++j) dot = fmaf(gv[k][j] * wv[j], xv[k][j], dot);
            }
        }
        dot = row_sum(dot, tpr, red);
        if (!active) continue;
        const float s = rstd[r];
        const float coef = static_cast<float>(static_cast<double>(s) * s * dot * inv_c);
#pragma unroll
        for (int k = 0; k < MAXV; ++k) {
            const int v = lane + k * tpr;
            if (v < nvec) {
                float wv[VEC], o[VEC];
                load_vec<VEC>(w + v * VEC, wv);
#pragma unroll
                for (int j = 0; j < VEC; ++j) {
                    o[j] = s * (wv[j] * gv[k][j] - xv[k][j] * coef);
                    dwa[k][j] = fmaf(gv[k][j] * xv[k][j], s, dwa[k][j]);
                }
                store_vec<VEC>(dx + base + v * VEC, o);
            }
        }
    }

    float* out = partial + static_cast<int64_t>(blockIdx.x) * cols;
    if (rpb == 1) {
#pragma unroll
        for (int k = 0; k < MAXV; ++k) {
            const int v = lane + k * tpr;
            if (v < nvec) store_vec<VEC>(out + v * VEC, dwa[k]);
        }
        return;
    }
#pragma unroll
    for (int k = 0; k < MAXV; ++k) {
        const int v = lane + k * tpr;
        if (v < nvec) store_vec<VEC>(stage + grp * cols + v * VEC, dwa[k]);
    }
    __syncthreads();
    for (int c = threadIdx.x; c < cols; c += blockDim.x) {
        float acc = 0.0f;
        for (int q = 0; q < rpb; ++q) acc += stage[q * cols + c];
        out[c] = acc;
    }
}

// out[y, c] = sum of in[b, c] over the chunk of rows b in [y * chunk, (y + 1) * chunk) (or, with
// accumulate, dw[c] += that sum for the single chunk y = 0): 16 slices of consecutive rows, then
// the slices, each in order. Block: 32 columns x 16 slices; grid (column blocks, chunks).
__global__ void __launch_bounds__(32 * kReduceSlices)
    rmsnorm_sum_rows_kernel(const float* __restrict__ in, int nrows, int cols, int chunk,
                            float* __restrict__ out, bool accumulate) {
    __shared__ float acc[kReduceSlices][33];
    const int cx = threadIdx.x % 32;
    const int slice = threadIdx.x / 32;
    const int c = blockIdx.x * 32 + cx;
    const int y = blockIdx.y;
    const int end = min(nrows, (y + 1) * chunk);
    const int per = (chunk + kReduceSlices - 1) / kReduceSlices;
    const int b0 = y * chunk + slice * per;
    const int b1 = min(end, b0 + per);
    float s = 0.0f;
    if (c < cols) {
#pragma unroll 8
        for (int b = b0; b < b1; ++b) s += in[static_cast<int64_t>(b) * cols + c];
    }
    acc[slice][cx] = s;
    __syncthreads();
    if (slice == 0 && c < cols) {
        float t = 0.0f;
        for (int q = 0; q < kReduceSlices; ++q) t += acc[q][cx];
        if (accumulate) {
            out[c] += t;
        } else {
            out[static_cast<int64_t>(y) * cols + c] = t;
        }
    }
}

void sum_rows(const float* in, int nrows, int cols, int chunk, float* out, bool accumulate,
              cudaStream_t stream) {
    const dim3 grid(static_cast<unsigned>((cols + 31) / 32),
                    static_cast<unsigned>((nrows + chunk - 1) / chunk));
    rmsnorm_sum_rows_kernel<<<grid, 32 * kReduceSlices, 0, stream>>>(in, nrows, cols, chunk, out,
                                                                     accumulate);
    DF_CUDA_CHECK_LAUNCH(rmsnorm_sum_rows_kernel);
}

template <class W>
void launch_rmsnorm_fwd(const uint16_t* x, const W* w, float eps, uint16_t* y, float* rstd,
                        int64_t rows, int64_t cols, bool pdl, cudaStream_t stream) {
    if (rows <= 0) return;
    const RmsNormGeometry g = rmsnorm_geometry(cols, vec_ok(cols, {x, w, y}));
    const auto blocks = static_cast<unsigned>((rows + g.rpb - 1) / g.rpb);
    const int c = static_cast<int>(cols);
    if (g.vec == 8 && g.maxv == 1) {
        DF_PDL_LAUNCH(pdl, (rmsnorm_fwd_kernel<W, 8, 1>), blocks, g.threads, 0, stream, x, w, y,
                      rstd, rows, c, g.tpr, eps);
    } else if (g.vec == 8) {
        DF_PDL_LAUNCH(pdl, (rmsnorm_fwd_kernel<W, 8, 4>), blocks, g.threads, 0, stream, x, w, y,
                      rstd, rows, c, g.tpr, eps);
    } else {
        DF_PDL_LAUNCH(pdl, (rmsnorm_fwd_kernel<W, 1, 32>), blocks, g.threads, 0, stream, x, w, y,
                      rstd, rows, c, g.tpr, eps);
    }
}

}  // namespace

void rmsnorm_fwd(const uint16_t* x, const uint16_t* w, float eps, uint16_t* y, float* rstd,
                 int64_t rows, int64_t cols, bool pdl, CUstream_st* stream) {
    launch_rmsnorm_fwd(x, w, eps, y, rstd, rows, cols, pdl, stream);
}

void rmsnorm_fwd(const uint16_t* x, const float* w, float eps, uint16_t* y, float* rstd,
                 int64_t rows, int64_t cols, bool pdl, CUstream_st* stream) {
    launch_rmsnorm_fwd(x, w, eps, y, rstd, rows, cols, pdl, stream);
}

size_t rmsnorm_bwd_workspace_bytes(int64_t rows, int64_t cols) {
    return static_cast<size_t>(rmsnorm_bwd_workspace_floats(rows, cols)) * sizeof(float);
}

void rmsnorm_bwd(const uint16_t* dy, const uint16_t* x, const uint16_t* w, const float* rstd,
                 uint16_t* dx, float* dw, int64_t rows, int64_t cols, void* workspace,
                 CUstream_st* stream) {
    if (rows <= 0) return;
    const RmsNormGeometry g = rmsnorm_geometry(cols, vec_ok(cols, {dy, x, w, dx}));
    const RmsNormBwdSplit split = rmsnorm_bwd_split(rows, g);
    auto* partial = static_cast<float*>(workspace);
    const auto blocks = static_cast<unsigned>(split.blocks);
    const auto smem = static_cast<size_t>(rmsnorm_bwd_smem_bytes(g, cols));
    const int c = static_cast<int>(cols);
    if (g.vec == 8 && g.maxv == 1) {
        rmsnorm_bwd_kernel<8, 1><<<blocks, g.threads, smem, stream>>>(dy, x, w, rstd, dx, partial,
                                                                      rows, c, g.tpr, split.blocks);
        DF_CUDA_CHECK_LAUNCH(rmsnorm_bwd_kernel_short);
    } else if (g.vec == 8) {
        rmsnorm_bwd_kernel<8, 4><<<blocks, g.threads, smem, stream>>>(dy, x, w, rstd, dx, partial,
                                                                      rows, c, g.tpr, split.blocks);
        DF_CUDA_CHECK_LAUNCH(rmsnorm_bwd_kernel_long);
    } else {
        rmsnorm_bwd_kernel<1, 32><<<blocks, g.threads, smem, stream>>>(
            dy, x, w, rstd, dx, partial, rows, c, g.tpr, split.blocks);
        DF_CUDA_CHECK_LAUNCH(rmsnorm_bwd_kernel_scalar);
    }
    // dw += the partials: in chunks of kRmsNormReduceChunk, then the chunk sums (fixed order).
    const auto nparts = static_cast<int>(split.blocks);
    if (split.reduce_groups == 1) {
        sum_rows(partial, nparts, c, nparts, dw, true, stream);
    } else {
        float* sums = partial + split.blocks * cols;
        const auto chunk = static_cast<int>(kRmsNormReduceChunk);
        sum_rows(partial, nparts, c, chunk, sums, false, stream);
        const auto groups = static_cast<int>(split.reduce_groups);
        sum_rows(sums, groups, c, groups, dw, true, stream);
    }
}

}  // namespace dflash::cuda::kernels

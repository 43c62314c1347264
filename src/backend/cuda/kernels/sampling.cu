// Token sampling on the device, one block per row (Backend::sample_rows; the distribution is
// backend/sampling.h's). Without top-k/top-p: the row's max, then each thread's contiguous slice's
// sum of exp((x - max) / T) in double, a block exclusive scan of those sums, and the one thread
// whose slice holds u * total walks it in index order. With top-k/top-p: the rows are first sorted
// by decreasing logit (CUB's segmented radix sort, stable: index order on ties, as the CPU's stable
// sort), the kept prefix is found by the same scan over sorted positions, marked in a byte mask,
// and the index-order walk runs over the marked tokens only. Deterministic: fixed slices, fixed
// scan order. Tested by tests/cuda/sampling_cuda_test.cpp.
#include <algorithm>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/sampling.h"

namespace dflash::cuda::kernels {
namespace {

constexpr int kThreads = 1024;
using Reduce = cub::BlockReduce<float, kThreads>;
using ReduceInt = cub::BlockReduce<int, kThreads>;
using Scan = cub::BlockScan<double, kThreads>;

struct Shared {
    union {
        Reduce::TempStorage reduce;
        ReduceInt::TempStorage reduce_int;
        Scan::TempStorage scan;
    } tmp;
    float max;
    int chosen;
    int last_thread;
    int keep;
};

// The slice [lo, hi) of n items that thread t owns.
__device__ void slice(int64_t n, int64_t& lo, int64_t& hi) {
    const int64_t per = (n + kThreads - 1) / kThreads;
    lo = min(n, per * threadIdx.x);
    hi = min(n, lo + per);
}

// Picks, in index order over [0, V), the token where the running sum of w(v) first exceeds
// u * total (the last token with positive weight when rounding leaves u * total at the end).
// w(v) must return the same float every call.
template <class W>
__device__ int walk(int64_t V, double u, W w, Shared& sh) {
    int64_t lo, hi;
    slice(V, lo, hi);
    double s = 0;
    for (int64_t v = lo; v < hi; ++v) s += w(v);
    double prefix = 0, total = 0;
    __syncthreads();
    Scan(sh.tmp.scan).ExclusiveSum(s, prefix, total);
    if (threadIdx.x == 0) sh.chosen = -1;
    __syncthreads();
    const int has = s > 0 ? static_cast<int>(threadIdx.x) : -1;
    const int last =
        ReduceInt(sh.tmp.reduce_int).Reduce(has, [](int a, int b) { return a > b ? a : b; });
    if (threadIdx.x == 0) sh.last_thread = last;
    const double target = u * total;
    if (s > 0 && target >= prefix && target < prefix + s) {
        double cum = prefix;
        int pick = -1;
        for (int64_t v = lo; v < hi && pick < 0; ++v) {
            const float e = w(v);
            if (e <= 0) continue;
            cum += e;
            if (target < cum) pick = static_cast<int>(v);
        }
        if (pick < 0) {  // rounding: the slice's last positive token
            for (int64_t v = hi - 1; v >= lo && pick < 0; --v)
                if (w(v) > 0) pick = static_cast<int>(v);
        }
        sh.chosen = pick;
    }
    __syncthreads();
    if (sh.chosen < 0 && static_cast<int>(threadIdx.x) == sh.last_thread) {
        for (int64_t v = hi - 1; v >= lo; --v) {
            if (w(v) > 0) {
                sh.chosen = static_cast<int>(v);
                break;
            }
        }
    }
    __syncthreads();
    return sh.chosen;
}

__global__ void __launch_bounds__(kThreads)
    sample_plain_kernel(const float* logits, int64_t V, float inv_t, const float* u, int32_t* out) {
    __shared__ Shared sh;
    const float* x = logits + blockIdx.x * V;
    float m = -INFINITY;
    for (int64_t v = threadIdx.x; v < V; v += kThreads) m = fmaxf(m, x[v]);
    m = Reduce(sh.tmp.reduce).Reduce(m, [](float a, float b) { return fmaxf(a, b); });
    if (threadIdx.x == 0) sh.max = m;
    __syncthreads();
    const float mx = sh.max;
    const int pick = walk(
        V, u[blockIdx.x], [&](int64_t v) { return expf((x[v] - mx) * inv_t); }, sh);
    if (threadIdx.x == 0) out[blockIdx.x] = pick < 0 ? 0 : pick;
}

__global__ void iota_rows_kernel(int32_t* idx, int64_t rows, int64_t V, int32_t* offsets) {
    const int64_t n = rows * V;
    for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
         i += int64_t{gridDim.x} * blockDim.x)
        idx[i] = static_cast<int32_t>(i % V);
    const int64_t t = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    if (t <= rows) offsets[t] = static_cast<int32_t>(t * V);
}

// Rows sorted by decreasing logit: keep the top_k, then the top_p nucleus of them; mark the kept
// tokens in `mask` (zeroed by the caller) and walk the marked ones in index order.
__global__ void __launch_bounds__(kThreads)
    sample_sorted_kernel(const float* logits, const float* sorted, const int32_t* order, int64_t V,
                         float inv_t, int64_t top_k, float top_p, const float* u, uint8_t* masks,
                         int32_t* out) {
    __shared__ Shared sh;
    const int64_t r = blockIdx.x;
    const float* x = logits + r * V;
    const float* key = sorted + r * V;
    const int32_t* idx = order + r * V;
    uint8_t* mask = masks + r * V;
    const float mx = key[0];
    const int64_t k = top_k > 0 && top_k < V ? top_k : V;
    int64_t lo, hi;
    slice(k, lo, hi);
    double s = 0;
    for (int64_t i = lo; i < hi; ++i) s += expf((key[i] - mx) * inv_t);
    double prefix = 0, kept = 0;
    Scan(sh.tmp.scan).ExclusiveSum(s, prefix, kept);
    if (threadIdx.x == 0) sh.keep = static_cast<int>(k);
    __syncthreads();
    if (top_p < 1.0f) {
        // The smallest prefix whose share of the kept mass reaches top_p.
        const double need = static_cast<double>(top_p) * kept;
        if (s > 0 && prefix + s >= need && prefix < need) {
            double cum = prefix;
            for (int64_t i = lo; i < hi; ++i) {
                cum += expf((key[i] - mx) * inv_t);
                if (cum >= need) {
                    sh.keep = static_cast<int>(i + 1);
                    break;
                }
            }
        }
        __syncthreads();
    }
    const int64_t keep = sh.keep;
    for (int64_t i = threadIdx.x; i < keep; i += kThreads) mask[idx[i]] = 1;
    __syncthreads();
    const int pick = walk(
        V, u[r], [&](int64_t v) { return mask[v] ? expf((x[v] - mx) * inv_t) : 0.0f; }, sh);
    if (threadIdx.x == 0) out[r] = pick < 0 ? idx[0] : pick;
}

size_t round_up(size_t b) {
    return (b + 255) / 256 * 256;
}

size_t sort_temp_bytes(int64_t rows, int64_t V) {
    size_t bytes = 0;
    DF_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        nullptr, bytes, static_cast<const float*>(nullptr), static_cast<float*>(nullptr),
        static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
        static_cast<int>(rows * V), static_cast<int>(rows), static_cast<const int32_t*>(nullptr),
        static_cast<const int32_t*>(nullptr) + 1, 0, 32, cudaStream_t{}));
    return bytes;
}

}  // namespace

size_t sample_rows_workspace_bytes(int64_t rows, int64_t vocab, bool restricted) {
    if (!restricted) return 0;
    const size_t n = static_cast<size_t>(rows * vocab);
    return round_up(n * 4) + round_up(n * 4) + round_up(n * 4) + round_up(n) +
           round_up(static_cast<size_t>(rows + 1) * 4) + round_up(sort_temp_bytes(rows, vocab));
}

void sample_rows(const float* logits, int64_t rows, int64_t vocab, float temperature, int64_t top_k,
                 float top_p, const float* u, int32_t* out, void* ws, size_t ws_bytes,
                 CUstream_st* stream) {
    if (rows <= 0 || vocab <= 0) return;
    const float inv_t = 1.0f / temperature;
    const bool restricted = (top_k > 0 && top_k < vocab) || top_p < 1.0f;
    if (!restricted) {
        sample_plain_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, vocab,
                                                                                  inv_t, u, out);
        DF_CUDA_CHECK_LAUNCH(sample_plain_kernel);
        return;
    }
    const size_t n = static_cast<size_t>(rows * vocab);
    auto* base = static_cast<char*>(ws);
    auto* keys = reinterpret_cast<float*>(base);
    base += round_up(n * 4);
    auto* idx_in = reinterpret_cast<int32_t*>(base);
    base += round_up(n * 4);
    auto* idx_out = reinterpret_cast<int32_t*>(base);
    base += round_up(n * 4);
    auto* mask = reinterpret_cast<uint8_t*>(base);
    base += round_up(n);
    auto* offsets = reinterpret_cast<int32_t*>(base);
    base += round_up(static_cast<size_t>(rows + 1) * 4);
    size_t temp_bytes = ws_bytes - static_cast<size_t>(base - static_cast<char*>(ws));
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256 + 1, 4096));
    iota_rows_kernel<<<blocks, 256, 0, stream>>>(idx_in, rows, vocab, offsets);
    DF_CUDA_CHECK_LAUNCH(iota_rows_kernel);
    DF_CUDA_CHECK(cudaMemsetAsync(mask, 0, n, stream));
    DF_CUDA_CHECK(cub::DeviceSegmentedRadixSort::SortPairsDescending(
        base, temp_bytes, logits, keys, idx_in, idx_out, static_cast<int>(n),
        static_cast<int>(rows), offsets, offsets + 1, 0, 32, stream));
    sample_sorted_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        logits, keys, idx_out, vocab, inv_t, top_k, top_p, u, mask, out);
    DF_CUDA_CHECK_LAUNCH(sample_sorted_kernel);
}

}  // namespace dflash::cuda::kernels

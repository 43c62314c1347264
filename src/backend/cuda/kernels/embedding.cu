// Embedding kernels. Forward: a gather, one 16-byte vector per thread. Backward without atomics:
// (id, position) pairs are radix-sorted by id (stable, so positions stay in order within an id),
// then one block per run of equal ids adds the run's dout rows into its dtable row in position
// order, each thread owning a few columns. Tested by tests/cuda/embedding_cuda_test.cpp.
#include <cub/device/device_radix_sort.cuh>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels/embedding.h"
#include "backend/cuda/kernels/vec_io.cuh"

namespace dflash::cuda::kernels {
namespace {

template <int VEC>
__global__ void embedding_fwd_kernel(const uint16_t* __restrict__ table, int64_t vocab, int64_t dim,
                                     const int32_t* __restrict__ ids, int64_t n_ids,
                                     uint16_t* __restrict__ out) {
    const int64_t per_row = dim / VEC;
    const int64_t items = n_ids * per_row;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < items;
         i += stride) {
        const int64_t s = i / per_row;
        const int64_t c = (i - s * per_row) * VEC;
        const int64_t id = ids[s];
        const bool ok = id >= 0 && id < vocab;
        if constexpr (VEC == 8) {
            const uint4 v =
                ok ? *reinterpret_cast<const uint4*>(table + id * dim + c) : make_uint4(0, 0, 0, 0);
            *reinterpret_cast<uint4*>(out + s * dim + c) = v;
        } else {
            out[s * dim + c] = ok ? table[id * dim + c] : uint16_t{0};
        }
    }
}

// keys[s] = ids[s], or vocab (sorted last, then skipped) for an id outside [0, vocab); rows[s] = s.
__global__ void embedding_keys_kernel(const int32_t* __restrict__ ids, int n_ids, int32_t vocab,
                                      int32_t* __restrict__ keys, int32_t* __restrict__ rows) {
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    if (s >= n_ids) return;
    const int32_t id = ids[s];
    keys[s] = id >= 0 && id < vocab ? id : vocab;
    rows[s] = s;
}

// Block x = sorted position i; only the first position of a run of equal keys does work: it sums
// the run's rows into dtable[key] in sorted (= position) order. Block y and the thread pick VEC
// columns.
template <int VEC>
__global__ void embedding_bwd_segments_kernel(const int32_t* __restrict__ keys,
                                              const int32_t* __restrict__ rows, int n_ids,
                                              const uint16_t* __restrict__ dout,
                                              float* __restrict__ dtable, int32_t vocab,
                                              int64_t dim) {
    const int i = blockIdx.x;
    const int32_t key = keys[i];
    if (key >= vocab || (i > 0 && keys[i - 1] == key)) return;
    const int64_t c = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * VEC;
    if (c >= dim) return;
    int end = i + 1;
    while (end < n_ids && keys[end] == key) ++end;
    float* dst = dtable + static_cast<int64_t>(key) * dim + c;
    float acc[VEC];
    load_vec<VEC>(dst, acc);
#pragma unroll 4
    for (int j = i; j < end; ++j) {
        float g[VEC];
        load_vec<VEC>(dout + static_cast<int64_t>(rows[j]) * dim + c, g);
#pragma unroll
        for (int k = 0; k < VEC; ++k) acc[k] += g[k];
    }
    store_vec<VEC>(dst, acc);
}

// Bits the sort looks at: enough for 0..vocab (vocab is the out-of-range key).
int key_bits(int64_t vocab) {
    int bits = 1;
    while ((int64_t{1} << bits) <= vocab) ++bits;
    return bits;
}

size_t round_up(size_t b) {
    return (b + 255) / 256 * 256;
}

size_t sort_temp_bytes(int n, int64_t vocab) {
    size_t bytes = 0;
    DF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
        nullptr, bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
        static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), n, 0, key_bits(vocab),
        cudaStream_t{}));
    return bytes;
}

}  // namespace

void embedding_fwd(const uint16_t* table, int64_t vocab, int64_t dim, const int32_t* ids,
                   int64_t n_ids, uint16_t* out, CUstream_st* stream) {
    if (n_ids <= 0 || dim <= 0) return;
    if (dim % 8 == 0 && aligned16(table) && aligned16(out)) {
        embedding_fwd_kernel<8><<<grid_blocks(n_ids * (dim / 8)), kThreads, 0, stream>>>(
            table, vocab, dim, ids, n_ids, out);
        DF_CUDA_CHECK_LAUNCH(embedding_fwd_kernel_vec);
    } else {
        embedding_fwd_kernel<1>
            <<<grid_blocks(n_ids * dim), kThreads, 0, stream>>>(table, vocab, dim, ids, n_ids, out);
        DF_CUDA_CHECK_LAUNCH(embedding_fwd_kernel_scalar);
    }
}

size_t embedding_bwd_workspace_bytes(int64_t n_ids, int64_t vocab) {
    if (n_ids <= 0) return 0;
    const int n = static_cast<int>(n_ids);
    return 4 * round_up(sizeof(int32_t) * static_cast<size_t>(n)) +
           round_up(sort_temp_bytes(n, vocab));
}

void embedding_bwd(const int32_t* ids, int64_t n_ids, const uint16_t* dout, float* dtable,
                   int64_t vocab, int64_t dim, void* workspace, size_t workspace_bytes,
                   CUstream_st* stream) {
    if (n_ids <= 0 || dim <= 0) return;
    const int n = static_cast<int>(n_ids);
    const size_t arr = round_up(sizeof(int32_t) * static_cast<size_t>(n));
    char* ws = static_cast<char*>(workspace);
    auto* keys_in = reinterpret_cast<int32_t*>(ws);
    auto* keys_out = reinterpret_cast<int32_t*>(ws + arr);
    auto* rows_in = reinterpret_cast<int32_t*>(ws + 2 * arr);
    auto* rows_out = reinterpret_cast<int32_t*>(ws + 3 * arr);
    void* temp = ws + 4 * arr;
    size_t temp_bytes = workspace_bytes - 4 * arr;

    embedding_keys_kernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, stream>>>(
        ids, n, static_cast<int32_t>(vocab), keys_in, rows_in);
    DF_CUDA_CHECK_LAUNCH(embedding_keys_kernel);
    DF_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, rows_in,
                                                  rows_out, n, 0, key_bits(vocab), stream));

    const bool vec = dim % 8 == 0 && aligned16(dout) && aligned16(dtable);
    const int64_t per_row = vec ? dim / 8 : dim;
    const int threads = static_cast<int>(std::min<int64_t>(kThreads, (per_row + 31) / 32 * 32));
    const dim3 grid(static_cast<unsigned>(n),
                    static_cast<unsigned>((per_row + threads - 1) / threads));
    if (vec) {
        embedding_bwd_segments_kernel<8><<<grid, threads, 0, stream>>>(
            keys_out, rows_out, n, dout, dtable, static_cast<int32_t>(vocab), dim);
        DF_CUDA_CHECK_LAUNCH(embedding_bwd_segments_kernel_vec);
    } else {
        embedding_bwd_segments_kernel<1><<<grid, threads, 0, stream>>>(
            keys_out, rows_out, n, dout, dtable, static_cast<int32_t>(vocab), dim);
        DF_CUDA_CHECK_LAUNCH(embedding_bwd_segments_kernel_scalar);
    }
}

}  // namespace dflash::cuda::kernels

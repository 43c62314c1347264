// Raw launchers of the CUDA mixture-of-experts kernels (moe.cu: routing, the counting sort of the
// (token, pick) pairs by expert, the weighted gather; moe_gemm.cu: the grouped expert GEMMs).
// Device pointers, sizes and a stream; no fmt, no Tensor (Note [No fmt in .cu files] in
// cuda_check.h): the Tensor-level checks live in backend/cuda/moe.cpp. bf16 tensors are passed as
// uint16_t*. Tested by tests/cuda/moe_cuda_test.cpp and, for the grouped GEMMs on the CPU
// emulator, tests/ops/moe_emu_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

#if defined(__CUDACC__) || defined(DF_ATTN_EMULATE)
#define DF_MOE_HD __host__ __device__
#else
#define DF_MOE_HD
#endif

namespace dflash::cuda::moe {

// ---- limits and tile arithmetic (shared by the kernels, the op and the tests)
// --------------------
constexpr int kMaxK = 32;          // picks per token (the routing kernel keeps them in registers)
constexpr int kMaxExperts = 2048;  // the sort's per-warp count table lives in shared memory
constexpr int kTileRows = 64;      // rows (pairs) of one grouped-GEMM block: 4 warps of 16
constexpr int kTileK = 64;         // reduction slice loaded per pipeline stage
constexpr int kTileCols = 128;     // B rows of one block: 128 outputs, or 64 gate + 64 up units
constexpr int kGatedUnits = kTileCols / 2;

DF_MOE_HD inline int cdiv(int a, int b) {
    return (a + b - 1) / b;
}

// Row tiles of an expert with `rows` pairs.
DF_MOE_HD inline int tiles_of(int rows) {
    return cdiv(rows, kTileRows);
}

// An upper bound on the row tiles of all experts together for n pairs over E experts (the
// grouped GEMMs' grid: blocks past the real count return at once). Each nonempty expert wastes
// less than one tile, and no tile is empty.
DF_MOE_HD inline int max_row_tiles(int n, int experts) {
    const int bound = tiles_of(n) + (experts < n ? experts : n);
    return bound < n ? bound : n;
}

// The expert whose row tiles hold tile tm: the e with tile_off[e] <= tm < tile_off[e + 1]
// (tile_off [E + 1] ascending; empty experts have equal neighbours and are skipped).
DF_MOE_HD inline int expert_of_tile(const int32_t* tile_off, int experts, int tm) {
    int lo = 0, hi = experts;  // the answer lies in [lo, hi)
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (tile_off[mid] <= tm) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    return lo;
}

// Warps of the sort kernel for E experts: its count table holds warps * E ints (32 KiB at most).
DF_MOE_HD inline int sort_warps(int experts) {
    const int w = 8192 / (experts > 0 ? experts : 1);
    return w < 1 ? 1 : (w > 32 ? 32 : w);
}

// ---- launchers
// ------------------------------------------------------------------------------------
enum RouterKind : int { kSoftmaxTopk = 0, kTopkSoftmax = 1 };
enum Activation : int { kNone = 0, kSwiglu = 1, kClampedSwiglu = 2 };

// logits f32 [rows, experts] -> ids i32 [rows, k], weights f32 [rows, k] (backend/op_list.h:
// moe_route). One warp per row; k <= kMaxK.
void route(const float* logits, int rows, int experts, int k, int kind, bool normalize,
           int32_t* ids, float* weights, CUstream_st* stream);

// The device memory moe_experts needs (one carve, 256-byte aligned pieces).
struct ExpertsScratch {
    int32_t* offsets = nullptr;       // [E + 1]: expert e's pairs sit at [offsets[e], offsets[e+1])
    int32_t* tile_offsets = nullptr;  // [E + 1]: expert e's row tiles start at tile_offsets[e]
    int32_t* sorted_pair = nullptr;   // [n]: the pair (r * k + j) at each sorted position
    int32_t* slot = nullptr;          // [n]: each pair's sorted position, -1 for a bad expert id
    uint16_t* act = nullptr;          // bf16 [n, I]: activations of the sorted pairs
    uint16_t* y = nullptr;            // bf16 [n, D]: expert outputs of the sorted pairs
};
size_t experts_scratch_bytes(int64_t pairs, int64_t experts, int64_t inter, int64_t dim);
ExpertsScratch carve_experts_scratch(void* base, int64_t pairs, int64_t experts, int64_t inter,
                                     int64_t dim);

struct ExpertsArgs {
    const uint16_t* x = nullptr;             // [R, D]
    const int32_t* ids = nullptr;            // [R, k]
    const float* weights = nullptr;          // [R, k]
    const uint16_t* gate_up = nullptr;       // [E, 2I, D]
    const uint16_t* gate_up_bias = nullptr;  // [E, 2I] or null
    const uint16_t* down = nullptr;          // [E, D, I]
    const uint16_t* down_bias = nullptr;     // [E, D] or null
    uint16_t* out = nullptr;                 // [R, D]
    int rows = 0, dim = 0, k = 0, experts = 0, inter = 0;
    int activation = kSwiglu;
    float limit = 7.0f, alpha = 1.702f;
};
// The whole op (backend/op_list.h: moe_experts): sort, gate_up GEMM + activation, down GEMM,
// weighted gather. experts <= kMaxExperts.
void experts(const ExpertsArgs& a, const ExpertsScratch& s, CUstream_st* stream);

// One grouped GEMM over the sorted pairs (moe_gemm.cu): for every expert e and its pairs
// s in [offsets[e], offsets[e+1]), out[s, :] = A_s · W_eᵀ (+ bias_e), fp32 accumulation.
// A_s = a[(sorted_pair[s] / k_per_row) * kdim ...] when sorted_pair is given (the tokens' x),
// else a[s * kdim ...]. Gated (activation != kNone): W_e [2N, kdim] holds N gate rows then N up
// rows, out[s, u] = act(gate_u + b, up_u + b) for u < N; otherwise W_e [N, kdim], out [n, N].
// Each output's reduction runs over kdim in one fixed order whatever the expert's row count
// (row invariance, Note [moe row invariance] in moe_gemm.cu).
struct GroupedGemmArgs {
    const uint16_t* a = nullptr;
    const int32_t* sorted_pair = nullptr;
    int k_per_row = 1;
    const uint16_t* w = nullptr;
    const uint16_t* bias = nullptr;  // [E, 2N] (gated) or [E, N], or null
    const int32_t* offsets = nullptr;
    const int32_t* tile_offsets = nullptr;
    int experts = 0;
    int pairs = 0;  // n: sizes the grid (max_row_tiles)
    int kdim = 0;
    int n = 0;
    uint16_t* out = nullptr;
    int activation = kNone;
    float limit = 7.0f, alpha = 1.702f;
};
void grouped_gemm(const GroupedGemmArgs& g, CUstream_st* stream);

}  // namespace dflash::cuda::moe

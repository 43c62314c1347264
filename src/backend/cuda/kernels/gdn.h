// Raw launchers of the CUDA Gated DeltaNet kernels (see backend/cuda/gdn.cpp for the Tensor-level
// ops and backend/op_list.h for the semantics): gdn.cu holds the conv, its cache roll, the
// recurrence's inputs, the token-by-token rule and the gated norm; gdn_chunked.cu the chunked
// rule. Device pointers, sizes and a stream; bf16 tensors as uint16_t*; no fmt (Note [No fmt in
// .cu files] in cuda_check.h). Forward only. Tested by tests/cuda/gdn_cuda_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::gdn {

constexpr int kChunk = 64;                // tokens per chunk of the chunked rule
constexpr int kMaxRecurrentKeyDim = 256;  // gdn_recurrent: 4 warps of at most 64 state rows
constexpr int kMaxChunkedDim = 128;       // gdn_chunked: dk and dv (shared-memory tiles)
constexpr size_t kChunkedScratchBudget = size_t{64} << 20;  // per-segment scratch, bytes

// y [S, C] = silu(causal depthwise conv of [state ; x] with w [C, K]); state f32 [K-1, C].
void conv(const uint16_t* x, const uint16_t* w, const float* state, uint16_t* y, int64_t S, int C,
          int K, CUstream_st* stream);
// state f32 [K-1, C] <- the last K-1 rows of [state ; x[0, n)], n = clamp(count[0], 0, S).
void conv_advance(float* state, const uint16_t* x, const int32_t* count, int64_t S, int C, int K,
                  CUstream_st* stream);

struct PrepareArgs {
    const uint16_t* conv_out = nullptr;  // [S, 2*Hk*dk + Hv*dv]
    const uint16_t* b = nullptr;         // [S, Hv]
    const uint16_t* a = nullptr;         // [S, Hv]
    const void* a_log = nullptr;         // [Hv], f32 or bf16 (a_log_bf16)
    const void* dt_bias = nullptr;       // [Hv], f32 or bf16 (dt_bias_bf16)
    bool a_log_bf16 = false, dt_bias_bf16 = false;
    float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
    int S = 0, Hk = 0, dk = 0, Hv = 0, dv = 0;
};
void prepare(const PrepareArgs& a, CUstream_st* stream);

// The gated delta rule's tensors (all f32; backend/op_list.h: gdn_chunked / gdn_recurrent).
struct RuleArgs {
    const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
    float* state = nullptr;          // [Hv, dk, dv], in place
    float* o = nullptr;              // [S, Hv, dv]; may be null for recurrent
    const int32_t* count = nullptr;  // recurrent only: i32 [1] or null (all S tokens)
    int S = 0, Hk = 0, dk = 0, Hv = 0, dv = 0;
};
void recurrent(const RuleArgs& a, CUstream_st* stream);

// Bytes of op workspace the chunked rule takes (one segment's per-chunk matrices).
size_t chunked_scratch_bytes(int S, int Hv, int dk, int dv);
void chunked(const RuleArgs& a, void* scratch, CUstream_st* stream);

// y [rows, dv] = bf16(bf16(bf16(o * rsqrt(mean(o^2) + eps)) * w) * silu(z)) per row of o f32
// [rows, dv]; z, y bf16 [rows, dv]; w bf16 [dv].
void gated_norm(const float* o, const uint16_t* z, const uint16_t* w, float eps, uint16_t* y,
                int64_t rows, int dv, CUstream_st* stream);

}  // namespace dflash::cuda::gdn

// Raw launchers of the decode block's kernels (rows_linear.cu, qk_norm_rope.cu; the Tensor-level
// ops are in backend/cuda/rows_linear.cpp). Device pointers, sizes and a stream; no fmt, no Tensor
// (Note [No fmt in .cu files] in cuda_check.h). bf16 tensors are passed as uint16_t*. Tested by
// tests/cuda/rows_linear_cuda_test.cpp and, for the products on the CPU emulator,
// tests/ops/rows_linear_emu_test.cpp.
#pragma once

#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::rows {

// Matches RowsEpilogue (backend/ops.h).
enum Epilogue : int { kStore = 0, kAdd = 1, kSwiglu = 2 };

// y [rows, cols] from x [rows, k] (rows <= 16, k a multiple of 8, x and every weight 16-byte
// aligned): store: the segments' outputs side by side (w[i] [n[i], k], nseg of them); add:
// residual + x · w[0]ᵀ; swiglu: silu(x · w[0]ᵀ) * (x · w[1]ᵀ), each product rounded to bf16 first.
// y is bf16, or f32 (store only) when y_f32.
struct RowsArgs {
    const uint16_t* x = nullptr;
    int rows = 0;
    int k = 0;
    const uint16_t* w[3] = {nullptr, nullptr, nullptr};
    int n[3] = {0, 0, 0};
    int nseg = 1;
    int epilogue = kStore;
    const uint16_t* residual = nullptr;
    void* y = nullptr;
    bool y_f32 = false;
    int sm_count = 132;  // the grid: as many blocks as stay resident, each taking several tiles
    bool pdl = false;    // launched with programmatic dependent launch (kernels/pdl.cuh)
};

// The columns one block covers (8 or 16) for this shape: 16 where that still gives every block
// at least two tiles and never straddles two segments (never for SwiGLU's pair). Depends on the
// weights' shapes alone, not on the rows (row invariance).
int rows_tile_cols(const RowsArgs& a);

void rows_linear(const RowsArgs& a, CUstream_st* stream);

// The fused q/k head norm, RoPE and cache write (backend/op_list.h: qk_norm_rope_cache).
struct QkNormRopeArgs {
    const uint16_t* qkv = nullptr;  // [rows, (h + 2 hkv) dh]
    const uint16_t* q_norm = nullptr;
    const uint16_t* k_norm = nullptr;
    float eps = 1e-6f;
    const int32_t* positions = nullptr;
    const float* inv_freq = nullptr;
    int half = 0;  // rotary pairs
    uint16_t* q_out = nullptr;
    uint16_t* k_cache = nullptr;
    uint16_t* v_cache = nullptr;
    int64_t capacity = 0;
    const int32_t* row0 = nullptr;
    int rows = 0, h = 0, hkv = 0, dh = 0;
    bool pdl = false;  // launched with programmatic dependent launch (kernels/pdl.cuh)
};
void qk_norm_rope_cache(const QkNormRopeArgs& a, CUstream_st* stream);

}  // namespace dflash::cuda::rows

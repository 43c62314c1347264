// Raw launchers of the CUDA attention kernels (attention_fwd.cu, attention_bwd.cu): device
// pointers, sizes and a stream; no fmt, no Tensor (Note [No fmt in .cu files] in cuda_check.h).
// The Tensor-level checks live in backend/cuda/attention.cpp. bf16 tensors are passed as
// uint16_t*. All pointers must be 16-byte aligned. Tested by tests/cuda/attention_cuda_test.cpp
// (numerics) and tests/ops/attention_tiles_test.cpp (the tile arithmetic they share).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels/attention_tiles.h"

struct CUstream_st;

namespace dflash::cuda::attn {

// The mask as the kernels read it: host sizes plus the device memory they read at run time.
struct MaskArgs {
    int kind = kCausal;
    int sq = 0;
    int sk = 0;  // key rows of k/v (the cache capacity when kv_len is given)
    int q_offset = 0;
    int ctx_len = 0;
    int block = 1;
    const int32_t* anchors = nullptr;    // dflash: i32 [N] on the device
    const int32_t* ctx_start = nullptr;  // dflash: i32 [N] on the device, or null (all 0)
    const int32_t* kv_len = nullptr;     // i32 [1] on the device, or null
    int window = 0;  // causal: a row at position p sees keys j > p - window; dflash: AttnMask's
    bool causal_block = false;     // dflash: slot k sees own-block slots <= k only
    const float* sinks = nullptr;  // f32 [H] on the device, or null: forward only (see AttnMask)
    const QTileKeys* qtiles = nullptr;  // dflash: [num_query_tiles(sq)], from dflash_plan()
};

// The forward kernel's block shape (Note [Wide forward tiles] in attention_tiles.h): rows64 is 4
// warps of 16 query rows; rows128 4 warps of 32 rows (each K/V fragment read from shared memory
// feeds two row groups' products, Q fragments re-read each key tile); rows128_8w 8 warps of 16
// rows. Head dim 256 always runs rows64 (a warp's 32 rows of fp32 output would not fit its
// registers). automatic picks kFwdTileDefault; the bench times each. rows128 is the default: on
// an H200 it ran causal S 4096 at 329 TFLOP/s against 150 (rows64) and 238 (rows128_8w), and the
// dflash mask at 320 against 154 (docs/performance.md, seventh session).
enum class FwdTile : int { automatic = 0, rows64 = 1, rows128 = 2, rows128_8w = 3 };
constexpr FwdTile kFwdTileDefault = FwdTile::rows128;

struct FwdArgs {
    const uint16_t* q = nullptr;  // [Sq, H, D]
    const uint16_t* k = nullptr;  // [Sk, Hkv, D]
    const uint16_t* v = nullptr;
    uint16_t* out = nullptr;  // [Sq, H, D]
    float* lse = nullptr;     // [H, Sq] or null
    int h = 0;
    int hkv = 0;
    int d = 0;
    MaskArgs mask;
    FwdTile tile = FwdTile::automatic;  // fwd() only; decode() ignores it
    bool pdl = false;  // decode() only: launched with programmatic dependent launch (pdl.cuh)
};

struct BwdArgs {
    const uint16_t* dout = nullptr;  // [Sq, H, D]
    const uint16_t* q = nullptr;
    const uint16_t* k = nullptr;  // [Sk, Hkv, D]
    const uint16_t* v = nullptr;
    const uint16_t* out = nullptr;
    const float* lse = nullptr;  // [H, Sq]
    uint16_t* dq = nullptr;
    uint16_t* dk = nullptr;
    uint16_t* dv = nullptr;
    float* delta = nullptr;  // scratch f32 [H, Sq]: rowsum(dout * out)
    // Splits of the segment-0 key tiles (attention_tiles.h); with more than one, scratch f32
    // partials [2 (dk, dv), kv_splits, segment-0 rows, Hkv, D].
    int kv_splits = 1;
    float* dkdv_partial = nullptr;
    int h = 0;
    int hkv = 0;
    int d = 0;
    MaskArgs mask;
};

// Head dims with kernels: 64, 128 and 256 (the hybrid families' gated attention, Qwen3-Next and
// Qwen3.5, and the drafters that copy their geometry). At 256 the tiles take 160 KiB (forward), up
// to 192 KiB (decode, dQ) and 193 KiB (dK/dV) of shared memory.
inline bool head_dim_supported(int d) {
    return d == 64 || d == 128 || d == 256;
}

// dflash: fills table[num_query_tiles(sq)] with each query tile's visible key ranges from the
// anchors (on the device). The table then goes into MaskArgs::qtiles.
void dflash_plan(const MaskArgs& m, QTileKeys* table, CUstream_st* stream);

// FlashAttention-2 forward: one block per (query tile, head).
void fwd(const FwdArgs& a, CUstream_st* stream);

// Split-KV decode forward for few queries (causal or full, kv_len on the device or not): scratch
// sizes in floats for the partial outputs [splits, H, Sq, D] and (max, sum) pairs.
inline size_t decode_partial_floats(const FwdArgs& a, const DecodePlan& p) {
    return static_cast<size_t>(p.splits) * a.h * a.mask.sq * a.d;
}
inline size_t decode_stats_floats(const FwdArgs& a, const DecodePlan& p) {
    return static_cast<size_t>(p.splits) * a.h * a.mask.sq * 2;
}
void decode(const FwdArgs& a, const DecodePlan& p, float* part_o, float* part_ml,
            CUstream_st* stream);

// Scratch floats for the dK/dV partials of `splits` splits (0 when splits <= 1).
inline size_t dkdv_partial_floats(const BwdArgs& a, int splits) {
    if (splits <= 1) return 0;
    return size_t{2} * splits * seg0_len(a.mask.kind, a.mask.sk, a.mask.ctx_len) * a.hkv * a.d;
}

// Backward: delta pre-pass, dK/dV per key tile, dQ per query tile; deterministic (no atomics).
void bwd(const BwdArgs& a, CUstream_st* stream);

}  // namespace dflash::cuda::attn

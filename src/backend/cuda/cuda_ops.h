// The CUDA ops at the Tensor level: the same semantics and shapes as the op list
// (backend/op_list.h) and the CPU reference (backend/cpu/cpu_ops.h), checked here (shapes by the
// shared checks of backend/op_shapes.h, dtypes and devices by each op), launched on
// ex.stream. Storage: activations and weights bf16, parameter gradients / masters / moments / rstd
// / lse / loss rows f32, ids and positions i32 (see each op). Each family has a `<family>.cpp` here
// (checks, dispatch) and `kernels/<family>.cu` + `kernels/<family>.h` (kernels and raw launchers;
// see Note [No fmt in .cu files] in cuda_check.h). Nothing here allocates or synchronises: op
// temporaries come from ex.scratch. No floating-point atomics in training kernels.
// Tested against the CPU backend by tests/cuda/*_test.cpp.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "core/tensor.h"

struct CUstream_st;

namespace dflash::cuda {

class OpWorkspace;
class GemmEngine;

struct Exec {
    CUstream_st* stream = nullptr;
    OpWorkspace* scratch = nullptr;  // op temporaries
    GemmEngine* gemm = nullptr;      // cuBLASLt handle, workspace and plan cache
    int sm_count = 132;
    int device = 0;  // the CUDA device index every tensor must live on
    // Decode-block kernels launched with programmatic dependent launch (kernels/pdl.cuh;
    // GraphOptions::programmatic_launch).
    bool pdl = false;
};

// Throws a dflash::Error naming op and argument when `t` is not on device ex.device or not of one
// of the listed dtypes (copy.cpp).
void check_device(const Exec& ex, const Tensor& t, const char* op, const char* name);

// The ops of backend/op_list.h, each as cuda::<name>(ex, <the op's arguments>), one family per
// file. The dtypes each family takes on CUDA:
//   copy.cpp        copy (f32 <-> bf16 convert), copy_columns, fill, write_rows: any dtype.
//   gemm.cpp        (cuBLASLt) A, B bf16; C bf16 or f32; fp32 accumulation.
//   embedding.cpp   table bf16 [V, D]; out bf16; dtable f32 (deterministic, no atomics).
//   rmsnorm.cpp     x, y, dy, dx bf16; w bf16; rstd f32; dw f32 (+=, deterministic).
//   rope.cpp        x bf16 [S, H, Dh] in place, positions i32 [S], inv_freq f32 [Dh/2].
//   attention.cpp   q/k/v/out/dout/dq/dk/dv bf16, lse f32 [H, Sq]; masks as AttnMask (anchors
//                   and kv_len read from device memory).
//   swiglu.cpp      bf16 [R, I].
//   elementwise.cpp y (bf16 or f32) += alpha * x (bf16 or f32); y *= alpha; y += bias (each
//                   bf16 or f32).
//   lm_head_ce.cpp  h bf16 [R, D], w bf16 [V, D], labels i32, weights f32, loss_rows f32,
//                   argmax i32, dh bf16, dw f32 (+=), workspace f32.
//   lm_head_kl.cpp  h, t bf16 [R, D], w bf16 [V, D], weights f32, loss_rows f32, argmax i32, dh
//                   bf16 or f32, dw f32 (+=), workspace f32.
//   loss_stats.cpp  loss_stats and argmax_rows (x f32 [R, V]).
//   dpace_weights.cpp  ce, weights, out f32 [R].
//   confidence_bce.cpp  z, dz bf16; tv, weights, grad_weights, loss_rows, dbias f32.
//   adamw.cpp       adamw_step: master, grad, m, v f32 (flat); grad_scale f32 [1] or empty; value
//                   bf16 or empty. sum_squares, clip_scale: f32.
//   muon.cpp        muon_momentum, muon_normalize, muon_update: f32 state; the normalised update
//                   and muon_update's x f32 or bf16; value bf16 or empty.
//   uniform_noise.cpp  add_uniform_noise: x f32 or bf16, seed i32 [2].
//   normal_fill.cpp fill_normal_hash: x f32 or bf16.
//   sampling.cpp    sample_rows: logits f32 [R, V], uniforms f32 [R], out i32 [R].
//   dyn_conv.cpp    x, base, delta, y, dy, dx, ddelta bf16; dbase f32 (+=).
//   selector_scores.cpp  z, codebooks, dz bf16; ids i32; scores, dA, dB f32 (+=).
//   topk.cpp        x f32 [R, V], values f32 [R, K], indices i32 [R, K].
//   selector_loss.cpp  every tensor f32 / i32 as on the CPU, except selector_unary_bwd's w
//                   (bf16, the LM head).
//   moe.cpp         moe_route: logits f32 [R, E], experts i32 [R, k], weights f32 [R, k];
//                   moe_experts: x, out, gate_up, down and their biases bf16, experts i32,
//                   weights f32 (kernels/moe.cu, kernels/moe_grouped.cu).
#define DFLASH_OP(name, params, args) void name(const Exec& ex, DFLASH_UNPAREN params);
#include "backend/op_list.h"

// The f32 elements of the LM head losses' workspace (Backend::lm_head_ce_workspace,
// Backend::lm_head_kl_workspace).
int64_t lm_head_ce_workspace(int64_t rows, int64_t dim, int64_t vocab, int64_t chunk);
int64_t lm_head_kl_workspace(int64_t rows, int64_t dim, int64_t vocab, int64_t chunk);

}  // namespace dflash::cuda

// The CUDA ops at the Tensor level: the same semantics and shapes as the Backend interface
// (backend/backend.h) and the CPU reference (backend/cpu/cpu_ops.h), checked here, launched on
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
};

// Throws a dflash::Error naming op and argument when `t` is not on device ex.device or not of one
// of the listed dtypes (checks.cpp).
void check_device(const Exec& ex, const Tensor& t, const char* op, const char* name);

// copy.cpp: same-device copies with f32 <-> bf16 conversion, column-block copy, fill, row writes
// at a device-held offset (write_rows).
void copy(const Exec& ex, const Tensor& dst, const Tensor& src);
void copy_columns(const Exec& ex, const Tensor& dst, int64_t col, const Tensor& src);
void fill(const Exec& ex, const Tensor& t, float value);
void write_rows(const Exec& ex, const Tensor& dst, const Tensor& row0, const Tensor& src);

// gemm.cpp (cuBLASLt): A, B bf16; C bf16 or f32; fp32 accumulation.
void gemm(const Exec& ex, const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
          const Tensor& c, float alpha, float beta);

// embedding.cpp: table bf16 [V, D]; out bf16; dtable f32 (deterministic, no atomics).
void embedding_fwd(const Exec& ex, const Tensor& table, const Tensor& ids, const Tensor& out);
void embedding_bwd(const Exec& ex, const Tensor& ids, const Tensor& dout, const Tensor& dtable);

// rmsnorm.cpp: x, y, dy, dx bf16; w bf16; rstd f32; dw f32 (+=, deterministic).
void rmsnorm_fwd(const Exec& ex, const Tensor& x, const Tensor& w, float eps, const Tensor& y,
                 const Tensor& rstd);
void rmsnorm_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& w,
                 const Tensor& rstd, const Tensor& dx, const Tensor& dw);

// rope.cpp: x bf16 [S, H, Dh] in place, positions i32 [S], inv_freq f32 [Dh/2].
void rope_fwd(const Exec& ex, const Tensor& x, const Tensor& positions, const Tensor& inv_freq);
void rope_bwd(const Exec& ex, const Tensor& dx, const Tensor& positions, const Tensor& inv_freq);

// attention.cpp: q/k/v/out/dout/dq/dk/dv bf16, lse f32 [H, Sq]; masks as AttnMask (anchors and
// kv_len read from device memory).
void attention_fwd(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                   const AttnMask& mask, const Tensor& out, const Tensor& lse);
void attention_bwd(const Exec& ex, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnMask& mask,
                   const Tensor& dq, const Tensor& dk, const Tensor& dv);

// swiglu.cpp: bf16 [R, I].
void swiglu_fwd(const Exec& ex, const Tensor& gate, const Tensor& up, const Tensor& out);
void swiglu_bwd(const Exec& ex, const Tensor& dout, const Tensor& gate, const Tensor& up,
                const Tensor& dgate, const Tensor& dup);

// elementwise.cpp: y (bf16 or f32) += alpha * x (bf16 or f32); y *= alpha.
void add_inplace(const Exec& ex, const Tensor& y, const Tensor& x, float alpha);
void scale_inplace(const Exec& ex, const Tensor& y, float alpha);
// y (bf16 or f32) [R, C] += bias (bf16 or f32) [C].
void add_row_bias(const Exec& ex, const Tensor& y, const Tensor& bias);

// lm_head_ce.cpp: h bf16 [R, D], w bf16 [V, D], labels i32, weights f32, loss_rows f32,
// argmax i32, dh bf16, dw f32 (+=), workspace f32 [lm_head_ce_workspace(R, D, V, chunk)].
void lm_head_ce(const Exec& ex, const Tensor& h, const Tensor& w, const Tensor& labels,
                const Tensor& weights, float grad_scale, int64_t chunk, const LmHeadCeOut& out);
int64_t lm_head_ce_workspace(int64_t rows, int64_t dim, int64_t vocab, int64_t chunk);

// lm_head_kl.cpp: h, t bf16 [R, D], w bf16 [V, D], weights f32, loss_rows f32, argmax i32, dh bf16
// or f32, dw f32 (+=), workspace f32 [lm_head_kl_workspace(R, D, V, chunk)].
void lm_head_kl(const Exec& ex, const Tensor& h, const Tensor& t, const Tensor& w,
                const Tensor& weights, float grad_scale, int64_t chunk, const LmHeadKlOut& out);
int64_t lm_head_kl_workspace(int64_t rows, int64_t dim, int64_t vocab, int64_t chunk);

// loss_stats.cpp: see Backend::loss_stats and argmax_rows (x f32 [R, V]).
void loss_stats(const Exec& ex, const Tensor& loss_rows, const Tensor& argmax, const Tensor& labels,
                const Tensor& weights, int64_t period, const Tensor& stats);
void argmax_rows(const Exec& ex, const Tensor& x, const Tensor& out);

// dyn_conv.cpp (DFlash2): x, base, delta, y, dy, dx, ddelta bf16; dbase f32 (+=).
void dyn_conv_fwd(const Exec& ex, const Tensor& x, const Tensor& base, const Tensor& delta,
                  int64_t half, int64_t block_size, const Tensor& y);
void dyn_conv_bwd(const Exec& ex, const Tensor& dy, const Tensor& x, const Tensor& base,
                  const Tensor& delta, int64_t half, int64_t block_size, const Tensor& dx,
                  const Tensor& dbase, const Tensor& ddelta);

// selector_scores.cpp (DFlash2): z, codebooks, dz bf16; ids i32; scores, dA, dB f32 (+=).
void selector_scores_fwd(const Exec& ex, const Tensor& z, const Tensor& pred, const Tensor& cand,
                         const Tensor& a, const Tensor& bc, const Tensor& out);
void selector_scores_bwd(const Exec& ex, const Tensor& dscores, const Tensor& z, const Tensor& pred,
                         const Tensor& cand, const Tensor& a, const Tensor& bc, const Tensor& dz,
                         const Tensor& da, const Tensor& dbc);

// topk.cpp: x f32 [R, V], values f32 [R, K], indices i32 [R, K].
void topk_rows(const Exec& ex, const Tensor& x, const Tensor& values, const Tensor& indices);

// selector_loss.cpp (DFlash2's selector training loss): every tensor f32 / i32 as on the CPU,
// except selector_unary_bwd's w (bf16, the LM head).
void selector_inject(const Exec& ex, const Tensor& logits, const Tensor& labels,
                     const Tensor& values, const Tensor& ids, const Tensor& label_pos,
                     const Tensor& hit);
void selector_ce(const Exec& ex, const SelectorCeArgs& a);
void selector_stats(const Exec& ex, const Tensor& loss_rows, const Tensor& pick,
                    const Tensor& label_pos, const Tensor& hit, const Tensor& weights,
                    int64_t block, const Tensor& stats);
void selector_unary_bwd(const Exec& ex, const Tensor& dvalues, const Tensor& ids, const Tensor& w,
                        const Tensor& out);
// sampling.cpp: see Backend::sample_rows (logits f32 [R, V], uniforms f32 [R], out i32 [R]).
void sample_rows(const Exec& ex, const Tensor& logits, const SampleParams& p,
                 const Tensor& uniforms, const Tensor& out);

// adamw.cpp: master, grad, m, v f32 (flat); grad_scale f32 [1] or empty; value bf16 or empty.
void adamw_step(const Exec& ex, const Tensor& master, const Tensor& grad, const Tensor& m,
                const Tensor& v, const AdamWParams& p, const Tensor& grad_scale,
                const Tensor& value);
void sum_squares(const Exec& ex, const Tensor& x, const Tensor& out);
void clip_scale(const Exec& ex, const Tensor& norm_sq, float max_norm, const Tensor& scale);

}  // namespace dflash::cuda

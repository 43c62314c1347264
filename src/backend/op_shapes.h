// Argument checks that every backend's ops share (dtypes and devices are each backend's own
// business): GEMM, LM head + CE and embedding shapes, AdamW's element counts and
// hyper-parameters, sampling's shapes and parameters. A violation is a
// dflash::Error naming the op, the tensors and what was expected.
// Tested by tests/ops/{gemm,adamw,lm_head_ce,lm_head_kl,embedding,sampling}_test.cpp and their
// CUDA twins.
#pragma once

#include <cstdint>

#include "backend/ops.h"
#include "core/tensor.h"

namespace dflash {

// C [m, n] = op(A) [m, k] · op(B) [k, n]; tensors of rank > 2 are viewed as [numel/last, last].
struct GemmDims {
    int64_t m = 0, n = 0, k = 0;
};
GemmDims check_gemm_shapes(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                           const Tensor& c);

// master, grad, m, v of equal element counts; step >= 1; betas in [0, 1).
void check_adamw_args(const Tensor& master, const Tensor& grad, const Tensor& m, const Tensor& v,
                      const AdamWParams& p);

// lm_head_ce: h [R, D] and w [V, D] (V >= 1) of the backend's dtypes (checked by the caller);
// labels i32 [R], weights f32 [R], chunk >= 1; the outputs asked for: loss_rows f32 [R], argmax
// i32 [R], dh shaped like h, dw f32 shaped like w.
void check_lm_head_ce_shapes(const Tensor& h, const Tensor& w, const Tensor& labels,
                             const Tensor& weights, int64_t chunk, const LmHeadCeOut& out);
// lm_head_kl: as lm_head_ce without labels, and the teacher's t of h's dtype and shape.
void check_lm_head_kl_shapes(const Tensor& h, const Tensor& t, const Tensor& w,
                             const Tensor& weights, int64_t chunk, const LmHeadKlOut& out);

// embedding: table [V, D]; rows (out or dout) holding ids.numel() rows of D.
void check_embedding_shapes(const Tensor& table, const Tensor& ids, const Tensor& rows,
                            const char* op, const char* table_name, const char* rows_name);

// write_rows: dst and src of one dtype with equal rows' shape (all but the first dimension);
// row0 i32 [1]. Returns the bytes of one row.
size_t check_write_rows_args(const Tensor& dst, const Tensor& row0, const Tensor& src);

// logits f32 [R, V], uniforms f32 [R], out i32 [R]; temperature > 0, top_k >= 0, top_p in (0, 1].
void check_sample_rows_args(const Tensor& logits, const SampleParams& p, const Tensor& uniforms,
                            const Tensor& out);

}  // namespace dflash

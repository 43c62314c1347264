// CUDA decode-block ops (backend/op_list.h: rows_linear, qk_norm_rope_cache): bf16 tensors (y f32
// allowed for rows_linear's store, the logits), checks, then the launchers of
// kernels/rows_linear.cu and kernels/qk_norm_rope.cu. Tested by
// tests/cuda/rows_linear_cuda_test.cpp.
#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/rows_linear.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

const uint16_t* cptr(const Tensor& t) {
    return t.empty() ? nullptr : static_cast<const uint16_t*>(t.data());
}
uint16_t* ptr(const Tensor& t) {
    return static_cast<uint16_t*>(t.data());
}
bool aligned16(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

}  // namespace

void rows_linear(const Exec& ex, const Tensor& x, const RowsLinear& w, const Tensor& residual,
                 const Tensor& y) {
    const char* op = "rows_linear";
    check_tensor(ex, x, DType::bf16, op, "x");
    const bool y_f32 = w.epilogue == RowsEpilogue::store && y.dtype() == DType::f32;
    check_tensor(ex, y, y_f32 ? DType::f32 : DType::bf16, op, "y");
    check_tensor(ex, residual, DType::bf16, op, "residual");
    const int64_t cols = check_rows_linear_shapes(x, w, residual, y);
    rows::RowsArgs a;
    a.x = cptr(x);
    a.rows = static_cast<int>(x.dim(0));
    a.k = static_cast<int>(x.dim(1));
    DF_CHECK(x.dim(1) % 8 == 0 && aligned16(x.data()),
             "{}: x {} needs a row length that is a multiple of 8 and 16-byte alignment", op,
             x.describe());
    DF_CHECK(cols < (int64_t{1} << 31) && x.dim(1) < (int64_t{1} << 31),
             "{}: {} columns of {} values exceed the kernel's 32-bit sizes", op, cols, x.dim(1));
    a.nseg = 0;
    for (int i = 0; i < 3; ++i) {
        if (w.w[i].empty()) continue;
        check_tensor(ex, w.w[i], DType::bf16, op, "w");
        DF_CHECK(aligned16(w.w[i].data()), "{}: w[{}] must be 16-byte aligned", op, i);
        a.w[i] = cptr(w.w[i]);
        a.n[i] = static_cast<int>(w.w[i].dim(0));
        ++a.nseg;
    }
    if (w.epilogue == RowsEpilogue::store && a.nseg > 1) {
        for (int i = 0; i + 1 < a.nseg; ++i) {
            DF_CHECK(a.n[i] % 8 == 0,
                     "{}: w[{}] has {} rows; side by side outputs need a multiple of 8 before "
                     "the last",
                     op, i, a.n[i]);
        }
    }
    if (w.epilogue != RowsEpilogue::store) {
        // add and swiglu read w[0] (and w[1]) column by column, not as segments.
        a.nseg = 1;
        a.n[1] = a.n[2] = 0;
    }
    a.epilogue = w.epilogue == RowsEpilogue::store ? rows::kStore
                 : w.epilogue == RowsEpilogue::add ? rows::kAdd
                                                   : rows::kSwiglu;
    if (w.epilogue == RowsEpilogue::swiglu) a.w[1] = cptr(w.w[1]);
    a.residual = cptr(residual);
    a.y = y.data();
    a.y_f32 = y_f32;
    a.sm_count = ex.sm_count;
    a.pdl = ex.pdl;
    rows::rows_linear(a, ex.stream);
}

void qk_norm_rope_cache(const Exec& ex, const Tensor& qkv, const Tensor& q_norm,
                        const Tensor& k_norm, float eps, const Tensor& positions,
                        const Tensor& inv_freq, const Tensor& q_out, const Tensor& k_cache,
                        const Tensor& v_cache, const Tensor& row0) {
    const char* op = "qk_norm_rope_cache";
    check_tensor(ex, qkv, DType::bf16, op, "qkv");
    check_tensor(ex, q_norm, DType::bf16, op, "q_norm");
    check_tensor(ex, k_norm, DType::bf16, op, "k_norm");
    check_tensor(ex, q_out, DType::bf16, op, "q_out");
    check_tensor(ex, k_cache, DType::bf16, op, "k_cache");
    check_tensor(ex, v_cache, DType::bf16, op, "v_cache");
    check_tensor(ex, inv_freq, DType::f32, op, "inv_freq");
    check_device(ex, positions, op, "positions");
    check_device(ex, row0, op, "row0");
    check_qk_norm_rope_cache_shapes(qkv, q_norm, k_norm, eps, positions, inv_freq, q_out, k_cache,
                                    v_cache, row0);
    DF_CHECK(q_out.dim(2) <= 256, "{}: head dim {} exceeds the kernel's 256", op, q_out.dim(2));
    rows::QkNormRopeArgs a;
    a.qkv = cptr(qkv);
    a.q_norm = cptr(q_norm);
    a.k_norm = cptr(k_norm);
    a.eps = eps;
    a.positions = static_cast<const int32_t*>(positions.data());
    a.inv_freq = static_cast<const float*>(inv_freq.data());
    a.half = static_cast<int>(inv_freq.numel());
    a.q_out = ptr(q_out);
    a.k_cache = ptr(k_cache);
    a.v_cache = ptr(v_cache);
    a.capacity = k_cache.dim(0);
    a.row0 = static_cast<const int32_t*>(row0.data());
    a.rows = static_cast<int>(q_out.dim(0));
    a.h = static_cast<int>(q_out.dim(1));
    a.hkv = static_cast<int>(k_cache.dim(1));
    a.dh = static_cast<int>(q_out.dim(2));
    a.pdl = ex.pdl;
    rows::qk_norm_rope_cache(a, ex.stream);
}

}  // namespace dflash::cuda

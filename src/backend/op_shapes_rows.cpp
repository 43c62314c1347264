// The shape contracts of the decode block's ops (backend/op_list.h: rows_linear,
// qk_norm_rope_cache), declared in backend/op_shapes.h. Tested by the wrong-argument cases of
// tests/ops/rows_linear_test.cpp.
#include "backend/op_shapes.h"
#include "core/error.h"

namespace dflash {

int64_t check_rows_linear_shapes(const Tensor& x, const RowsLinear& w, const Tensor& residual,
                                 const Tensor& y) {
    const char* op = "rows_linear";
    DF_CHECK(x.rank() == 2 && x.dim(0) >= 1 && x.dim(0) <= kRowsLinearMaxRows,
             "{}: x is {}; expected [R, K] with 1 <= R <= {} rows", op, x.describe(),
             kRowsLinearMaxRows);
    const int64_t R = x.dim(0), K = x.dim(1);
    const int nw = !w.w[2].empty() ? 3 : !w.w[1].empty() ? 2 : 1;
    DF_CHECK(!w.w[0].empty() && (nw < 3 || !w.w[1].empty()),
             "{}: the weights are given in order from w[0] (w[0] {}, w[1] {}, w[2] {})", op,
             w.w[0].describe(), w.w[1].describe(), w.w[2].describe());
    int64_t cols = 0;
    for (int i = 0; i < nw; ++i) {
        const Tensor& wi = w.w[i];
        DF_CHECK(wi.rank() == 2 && wi.dim(1) == K && wi.dim(0) >= 1 && wi.dtype() == x.dtype(),
                 "{}: w[{}] is {}; expected [N, {}] of x's dtype ({})", op, i, wi.describe(), K,
                 x.describe());
        cols += wi.dim(0);
    }
    const int64_t n0 = w.w[0].dim(0);
    switch (w.epilogue) {
        case RowsEpilogue::store:
            DF_CHECK(residual.empty(), "{}: the store epilogue takes no residual (got {})", op,
                     residual.describe());
            break;
        case RowsEpilogue::add:
            DF_CHECK(nw == 1, "{}: the add epilogue takes one weight, got {}", op, nw);
            DF_CHECK(residual.rank() == 2 && residual.dim(0) == R && residual.dim(1) == n0 &&
                         residual.dtype() == y.dtype(),
                     "{}: residual is {}; expected [{}, {}] of y's dtype ({})", op,
                     residual.describe(), R, n0, y.describe());
            cols = n0;
            break;
        case RowsEpilogue::swiglu:
            DF_CHECK(nw == 2 && w.w[1].dim(0) == n0,
                     "{}: the swiglu epilogue takes a gate and an up weight of equal shape, got "
                     "{} and {}",
                     op, w.w[0].describe(), w.w[1].describe());
            DF_CHECK(residual.empty(), "{}: the swiglu epilogue takes no residual (got {})", op,
                     residual.describe());
            cols = n0;
            break;
    }
    DF_CHECK(y.rank() == 2 && y.dim(0) == R && y.dim(1) == cols, "{}: y is {}; expected [{}, {}]",
             op, y.describe(), R, cols);
    return cols;
}

void check_qk_norm_rope_cache_shapes(const Tensor& qkv, const Tensor& q_norm, const Tensor& k_norm,
                                     float eps, const Tensor& positions, const Tensor& inv_freq,
                                     const Tensor& q_out, const Tensor& k_cache,
                                     const Tensor& v_cache, const Tensor& row0) {
    const char* op = "qk_norm_rope_cache";
    DF_CHECK(q_out.rank() == 3 && k_cache.rank() == 3,
             "{}: q_out {} and k_cache {} must be [R, H, Dh] and [C, Hkv, Dh]", op,
             q_out.describe(), k_cache.describe());
    const int64_t R = q_out.dim(0), H = q_out.dim(1), Dh = q_out.dim(2);
    const int64_t Hkv = k_cache.dim(1);
    DF_CHECK(k_cache.dim(2) == Dh && Hkv >= 1 && H % Hkv == 0 && Dh % 2 == 0,
             "{}: k_cache {} does not fit q_out {} (equal even head dims, H a multiple of Hkv)", op,
             k_cache.describe(), q_out.describe());
    DF_CHECK(v_cache.shape() == k_cache.shape() && v_cache.dtype() == k_cache.dtype() &&
                 k_cache.dtype() == q_out.dtype(),
             "{}: v_cache {} must be shaped as k_cache {}, both of q_out's dtype ({})", op,
             v_cache.describe(), k_cache.describe(), q_out.describe());
    DF_CHECK(qkv.rank() == 2 && qkv.dim(0) == R && qkv.dim(1) == (H + 2 * Hkv) * Dh &&
                 qkv.dtype() == q_out.dtype(),
             "{}: qkv is {}; expected [{}, {}] of q_out's dtype", op, qkv.describe(), R,
             (H + 2 * Hkv) * Dh);
    for (const Tensor* t : {&q_norm, &k_norm}) {
        DF_CHECK(t->empty() || (t->numel() == Dh && t->dtype() == q_out.dtype()),
                 "{}: a head norm weight is {}; expected [{}] of q_out's dtype, or empty", op,
                 t->describe(), Dh);
    }
    DF_CHECK(eps > 0.0f, "{}: eps={} must be > 0", op, eps);
    DF_CHECK(inv_freq.numel() >= 1 && inv_freq.numel() <= Dh / 2 && inv_freq.dtype() == DType::f32,
             "{}: inv_freq is {}; expected f32 [R/2] with R <= Dh = {}", op, inv_freq.describe(),
             Dh);
    DF_CHECK(positions.dtype() == DType::i32 && positions.numel() == R,
             "{}: positions is {}; expected i32 [{}]", op, positions.describe(), R);
    DF_CHECK(row0.dtype() == DType::i32 && row0.numel() == 1, "{}: row0 {} must be i32 [1]", op,
             row0.describe());
}

}  // namespace dflash

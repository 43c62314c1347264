// cuda::lm_head_kl: the LM head + distribution losses (forward and reverse KL, JSD, TV and their
// mixes) over vocabulary chunks, never a whole [R, V] logits matrix, with the CPU reference's
// semantics (Note [Chunked divergences] in backend/cpu/lm_head_kl.cpp). Host code: checks,
// workspace carving, and the sequence of cuBLASLt GEMMs and row kernels (kernels/lm_head_kl.cu).
// Tested by tests/cuda/lm_head_kl_cuda_test.cpp.
//
// Pass 1 per chunk: d_c = h · w_cᵀ and t_c = t · w_cᵀ (f32), then the row statistics. The mixed
// pass (only for JSD or TV): both chunks again, then the JSD / TV sums. Pass 2 (with dh or dw):
// both chunks again, g = grad_scale * weight * (the mix's gradient) in bf16, dh_acc (f32) +=
// g · w_c, dw_c += gᵀ · h. With a single chunk the later passes reuse pass 1's logits. Unlike
// lm_head_ce's flash-style dh there is no one-hot to cancel against: each closed form is formed
// in f32 before the bf16 rounding, so its relative error stays 2^-9 however close q is to p.
// GEMMs per chunk: 2 (loss only), 5 (dh or dw), 6 (both), plus 2 for the mixed pass; 2 fewer per
// later pass with a single chunk.
#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/lm_head_kl.h"
#include "backend/cuda/kernels/row_stats.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"
#include "core/error.h"

namespace dflash::cuda {
namespace {

// The workspace (f32 elements), each part on a 256-byte boundary: both sides' logits f32
// [R, step], g bf16 [R, step], the per-row arrays, then the f32 [R, D] dh accumulator.
struct KlLayout {
    int64_t d = 0, t = 0, g = 0;
    int64_t rows[kKlRowArrayCount] = {};
    int64_t acc = 0;
    int64_t total = 0;
};

KlLayout kl_layout(int64_t rows, int64_t dim, int64_t vocab, int64_t chunk) {
    const int64_t step = lm_step(vocab, chunk);
    KlLayout l;
    int64_t at = 0;
    l.d = at;
    at += lm_align64(rows * step);
    l.t = at;
    at += lm_align64(rows * step);
    l.g = at;
    at += lm_align64((rows * step + 1) / 2);
    for (int64_t& p : l.rows) {
        p = at;
        at += lm_align64(rows);
    }
    l.acc = at;
    at += lm_align64(rows * dim);
    l.total = at;
    return l;
}

KlRowArrays row_arrays(float* base, const KlLayout& l) {
    KlRowArrays a;
    a.d_max = base + l.rows[0];
    a.d_sum = base + l.rows[1];
    a.t_max = base + l.rows[2];
    a.t_sum = base + l.rows[3];
    a.cross_p = base + l.rows[4];
    a.cross_q = base + l.rows[5];
    a.d_arg = reinterpret_cast<int32_t*>(base + l.rows[6]);
    a.lse_d = base + l.rows[7];
    a.lse_t = base + l.rows[8];
    a.kl = base + l.rows[9];
    a.rkl = base + l.rows[10];
    a.jsd = base + l.rows[11];
    a.kl_qm = base + l.rows[12];
    a.tv = base + l.rows[13];
    a.u = base + l.rows[14];
    return a;
}

void check_inputs(const Exec& ex, const Tensor& h, const Tensor& t, const Tensor& w,
                  const Tensor& weights, int64_t chunk, const LmHeadDivergences& div,
                  const LmHeadKlOut& out) {
    for (const auto& [x, name] :
         {std::pair{&h, "h"}, std::pair{&t, "t"}, std::pair{&w, "w"},
          std::pair{&weights, "weights"}, std::pair{&out.loss_rows, "loss_rows"},
          std::pair{&out.argmax, "argmax"}, std::pair{&out.dh, "dh"}, std::pair{&out.dw, "dw"},
          std::pair{&out.workspace, "workspace"}}) {
        check_device(ex, *x, "lm_head_kl", name);
    }
    DF_CHECK(h.dtype() == DType::bf16 && w.dtype() == DType::bf16 &&
                 (out.dh.empty() || out.dh.dtype() == DType::bf16 || out.dh.dtype() == DType::f32),
             "lm_head_kl: h {}, w {}, dh {}; the CUDA op takes bf16 h, t and w, bf16 or f32 dh",
             h.describe(), w.describe(), out.dh.describe());
    check_lm_head_kl_shapes(h, t, w, weights, chunk, div, out);
    DF_CHECK(w.dim(0) <= INT32_MAX, "lm_head_kl: vocabulary {} does not fit the i32 argmax",
             w.dim(0));
    const int64_t need = lm_head_kl_workspace(h.dim(0), h.dim(1), w.dim(0), chunk);
    DF_CHECK(out.workspace.empty() ||
                 (out.workspace.dtype() == DType::f32 && out.workspace.numel() >= need),
             "lm_head_kl: workspace is {}, expected f32 with >= {} elements "
             "(Backend::lm_head_kl_workspace({}, {}, {}, {}))",
             out.workspace.describe(), need, h.dim(0), h.dim(1), w.dim(0), chunk);
}

}  // namespace

int64_t lm_head_kl_workspace(int64_t rows, int64_t dim, int64_t vocab, int64_t chunk) {
    DF_CHECK(rows >= 0 && dim >= 1 && vocab >= 1 && chunk >= 1,
             "lm_head_kl_workspace: rows={} dim={} vocab={} chunk={}", rows, dim, vocab, chunk);
    return kl_layout(rows, dim, vocab, chunk).total;
}

void lm_head_kl(const Exec& ex, const Tensor& h, const Tensor& t, const Tensor& w,
                const Tensor& weights, float grad_scale, int64_t chunk,
                const LmHeadDivergences& div, const LmHeadKlOut& out) {
    check_inputs(ex, h, t, w, weights, chunk, div, out);
    const int64_t r = h.dim(0), d = h.dim(1), v = w.dim(0);
    if (r == 0) return;
    const int64_t step = lm_step(v, chunk), chunks = lm_chunk_count(v, step);
    const KlLayout lay = kl_layout(r, d, v, chunk);
    // The caller's workspace, or (op tests) a temporary of the same size.
    float* base = out.workspace.empty()
                      ? ex.scratch->take_n<float>(static_cast<size_t>(lay.total),
                                                  "lm_head_kl workspace (none given)")
                      : out.workspace.f32();
    const DeviceRef dev = h.device();
    const KlRowArrays st = row_arrays(base, lay);
    const auto logits = [&](int64_t part, int64_t n) {
        return Tensor(base + part, DType::f32, Shape{r, n}, dev);
    };

    const KlMix mix{div.kl, div.rkl, div.jsd, div.tv};
    const auto chunk_logits = [&](int64_t v0, int64_t n) {
        const Tensor wc = w.rows(v0, v0 + n);
        gemm(ex, h, false, wc, true, logits(lay.d, n), 1.0f, 0.0f);
        gemm(ex, t, false, wc, true, logits(lay.t, n), 1.0f, 0.0f);
    };
    const auto row_args = [&](int64_t c, int64_t v0, int64_t n) {
        KlStatsArgs a;
        a.d = base + lay.d;
        a.t = base + lay.t;
        a.rows = r, a.n = n, a.v0 = v0;
        a.weights = weights.f32();
        a.mix = mix;
        a.st = st;
        a.first = c == 0, a.last = c + 1 == chunks;
        a.loss_rows = out.loss_rows.empty() ? nullptr : out.loss_rows.f32();
        a.argmax = out.argmax.empty() ? nullptr : out.argmax.i32();
        return a;
    };

    for (int64_t c = 0; c < chunks; ++c) {  // pass 1: statistics
        const int64_t v0 = lm_chunk_begin(c, step), n = lm_chunk_size(c, v, step);
        chunk_logits(v0, n);
        kl_stats_chunk(row_args(c, v0, n), ex.stream);
    }
    if (mix.mixed_pass()) {
        for (int64_t c = 0; c < chunks; ++c) {  // the mixed pass: JSD, KL(q || m), TV, u
            const int64_t v0 = lm_chunk_begin(c, step), n = lm_chunk_size(c, v, step);
            if (chunks > 1) chunk_logits(v0, n);
            kl_mixed_chunk(row_args(c, v0, n), ex.stream);
        }
    }
    const bool want_dh = !out.dh.empty(), want_dw = !out.dw.empty();
    if (!want_dh && !want_dw) return;
    // dh accumulates in f32: dh itself when f32, else the workspace's accumulator.
    const Tensor acc = !want_dh || out.dh.dtype() == DType::f32
                           ? out.dh
                           : Tensor(base + lay.acc, DType::f32, Shape{r, d}, dev);
    for (int64_t c = 0; c < chunks; ++c) {  // pass 2: gradients
        const int64_t v0 = lm_chunk_begin(c, step), n = lm_chunk_size(c, v, step);
        const Tensor wc = w.rows(v0, v0 + n);
        if (chunks > 1) chunk_logits(v0, n);
        const Tensor g(base + lay.g, DType::bf16, Shape{r, n}, dev);
        kl_grad_chunk(base + lay.d, base + lay.t, r, n, weights.f32(), grad_scale, mix, st,
                      g.bf16(), ex.stream);
        if (want_dh) gemm(ex, g, false, wc, false, acc, 1.0f, c == 0 ? 0.0f : 1.0f);
        if (want_dw) gemm(ex, g, true, h, false, out.dw.rows(v0, v0 + n), 1.0f, 1.0f);
    }
    if (want_dh && out.dh.dtype() == DType::bf16) copy(ex, out.dh, acc);
}

}  // namespace dflash::cuda

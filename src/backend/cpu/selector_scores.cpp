// DFlash2's candidate-selector pair scores (docs/formats.md "DFlash2 drafter directory"; semantics
// on Backend::selector_scores_fwd) and their backward. Tested by
// tests/ops/selector_scores_test.cpp.
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

void check_inputs(const Tensor& z, const Tensor& a, const Tensor& bc, const Tensor& scores,
                  const char* op) {
    check_cpu_f32(z, op, "z");
    check_cpu_f32(a, op, "predecessor codebook");
    check_cpu_f32(bc, op, "successor codebook");
    check_cpu_f32(scores, op, "scores");
}

// The ids index codebook rows: an id outside the vocabulary would read past them.
void check_ids(const Tensor& pred, const Tensor& cand, const SelectorDims& d, const char* op) {
    for (const Tensor* ids : {&pred, &cand})
        for (int64_t i = 0; i < ids->numel(); ++i)
            DF_CHECK(ids->i32()[i] >= 0 && ids->i32()[i] < d.V,
                     "{}: {} id {} at entry {} is outside the vocabulary [0, {})", op,
                     ids == &pred ? "predecessor" : "candidate", ids->i32()[i], i, d.V);
}

}  // namespace

void selector_scores_fwd(const Exec& ex, const Tensor& z, const Tensor& pred, const Tensor& cand,
                         const Tensor& a, const Tensor& bc, const Tensor& out) {
    check_inputs(z, a, bc, out, "selector_scores_fwd");
    const SelectorDims d = check_selector_scores_fwd_shapes(z, pred, cand, a, bc, out);
    check_ids(pred, cand, d, "selector_scores_fwd");
    parallel_for(ex, d.P, d.P * d.Kp * d.K * d.r > 65536, [&](int64_t p0, int64_t p1) {
        std::vector<float> w(d.r);
        for (int64_t p = p0; p < p1; ++p)
            for (int64_t i = 0; i < d.Kp; ++i) {
                const float* ar = a.f32() + pred.i32()[p * d.Kp + i] * d.r;
                for (int64_t j = 0; j < d.r; ++j) w[j] = ar[j] * z.f32()[p * d.r + j];
                for (int64_t c = 0; c < d.K; ++c) {
                    const float* br = bc.f32() + cand.i32()[p * d.K + c] * d.r;
                    float acc = 0.0f;
                    for (int64_t j = 0; j < d.r; ++j) acc += w[j] * br[j];
                    out.f32()[(p * d.Kp + i) * d.K + c] = acc;
                }
            }
    });
}

void selector_scores_bwd(const Exec& ex, const Tensor& dscores, const Tensor& z, const Tensor& pred,
                         const Tensor& cand, const Tensor& a, const Tensor& bc, const Tensor& dz,
                         const Tensor& da, const Tensor& dbc) {
    check_inputs(z, a, bc, dscores, "selector_scores_bwd");
    check_cpu_f32(dz, "selector_scores_bwd", "dz");
    check_cpu_f32(da, "selector_scores_bwd", "dA");
    check_cpu_f32(dbc, "selector_scores_bwd", "dB");
    const SelectorDims d =
        check_selector_scores_bwd_shapes(dscores, z, pred, cand, a, bc, dz, da, dbc);
    check_ids(pred, cand, d, "selector_scores_bwd");
    const float* g = dscores.f32();
    // One rank column per iteration: every sum over slots runs in order, so repeated ids
    // accumulate deterministically without atomics.
    parallel_for(ex, d.r, d.P * d.Kp * d.K * d.r > 65536, [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j)
            for (int64_t p = 0; p < d.P; ++p) {
                const float zj = z.f32()[p * d.r + j];
                float dzj = 0.0f;
                for (int64_t i = 0; i < d.Kp; ++i) {
                    const int64_t ai = pred.i32()[p * d.Kp + i];
                    const float aij = a.f32()[ai * d.r + j];
                    float sum_b = 0.0f;  // sum_c dS[p, i, c] * Bc[cand c, j]
                    for (int64_t c = 0; c < d.K; ++c) {
                        const int64_t bi = cand.i32()[p * d.K + c];
                        const float gs = g[(p * d.Kp + i) * d.K + c];
                        sum_b += gs * bc.f32()[bi * d.r + j];
                        dbc.f32()[bi * d.r + j] += gs * zj * aij;
                    }
                    da.f32()[ai * d.r + j] += sum_b * zj;
                    dzj += sum_b * aij;
                }
                dz.f32()[p * d.r + j] = dzj;
            }
    });
}

}  // namespace dflash::cpu

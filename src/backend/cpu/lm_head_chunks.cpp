// Chunk GEMMs of the LM-head losses (see lm_head_chunks.h). Tested through
// tests/ops/lm_head_ce_test.cpp and tests/ops/lm_head_kl_test.cpp.
#include "backend/cpu/lm_head_chunks.h"

#include "backend/cpu/sgemm.h"

namespace dflash::cpu {

void lm_chunk_logits(const Exec& ex, const Tensor& h, const Tensor& w, int64_t v0, int64_t n,
                     float* logits) {
    const int64_t r = h.dim(0), d = h.dim(1);
    if (r == 0) return;
    parallel_for(ex, n, r * n * d > (1 << 17), [&](int64_t j0, int64_t j1) {
        sgemm(r, j1 - j0, d, 1.0f, {h.f32(), d, false}, {w.f32() + (v0 + j0) * d, d, true}, 0.0f,
              logits + j0, n);
    });
}

void lm_chunk_grads(const Exec& ex, const float* g, const Tensor& h, const Tensor& w, int64_t v0,
                    int64_t n, const Tensor& dh, const Tensor& dw) {
    const int64_t r = h.dim(0), d = h.dim(1);
    if (r == 0) return;
    const bool parallel = r * n * d > (1 << 17);
    if (!dh.empty()) {
        parallel_for(ex, d, parallel, [&](int64_t c0, int64_t c1) {
            sgemm(r, c1 - c0, n, 1.0f, {g, n, false}, {w.f32() + v0 * d + c0, d, false},
                  v0 == 0 ? 0.0f : 1.0f, dh.f32() + c0, d);
        });
    }
    if (!dw.empty()) {
        parallel_for(ex, n, parallel, [&](int64_t j0, int64_t j1) {
            sgemm(j1 - j0, d, r, 1.0f, {g + j0, n, true}, {h.f32(), d, false}, 1.0f,
                  dw.f32() + (v0 + j0) * d, d);
        });
    }
}

}  // namespace dflash::cpu

// fp32 weight panels and their products (Note [f32 panels] in f32_panels.h). Tested by
// tests/ops/f32_panels_test.cpp.
#include "backend/cpu/f32_panels.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace dflash::cpu {

bool f32_panels_supported(CpuIsa isa) {
    return isa_supported(isa) && (isa == CpuIsa::avx512 || isa == CpuIsa::avx2);
}

F32Panels pack_f32_panels(const Exec& ex, CpuIsa isa, const float* w, int64_t n, int64_t k) {
    DF_CHECK(n >= 0 && k >= 0, "pack_f32_panels: a weight of [{}, {}]", n, k);
    DF_ASSERT(f32_panels_supported(isa), "pack_f32_panels: no panel kernels for {} here",
              isa_name(isa));
    F32Panels out;
    out.n = n;
    out.k = k;
    out.isa = isa;
    out.nc = isa == CpuIsa::avx512 ? panel_width_avx512() : panel_width_avx2();
    out.source = w;
    const int64_t panels = out.panels(), nc = out.nc;
    // aligned_alloc wants a multiple of the alignment: nc * 4 bytes is one.
    const size_t bytes = static_cast<size_t>(std::max<int64_t>(1, panels * k)) * nc * sizeof(float);
    out.data.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
    DF_CHECK(out.data != nullptr,
             "out of host memory copying a [{}, {}] weight into panels ({} "
             "bytes)",
             n, k, bytes);
    float* dst = out.data.get();
    parallel_for(ex, panels, static_cast<double>(n) * k >= kParallelFlops,
                 [&](int64_t p0, int64_t p1) {
                     for (int64_t p = p0; p < p1; ++p) {
                         float* panel = dst + p * k * nc;
                         std::memset(panel, 0, static_cast<size_t>(k * nc) * sizeof(float));
                         for (int64_t j = p * nc; j < std::min(n, (p + 1) * nc); ++j)
                             for (int64_t kk = 0; kk < k; ++kk)
                                 panel[kk * nc + (j - p * nc)] = w[j * k + kk];
                     }
                 });
    return out;
}

void linear_f32_panels(const Exec& ex, int64_t m, const float* x, int64_t ldx, const F32Panels& w,
                       float beta, float* y, int64_t ldy) {
    if (m <= 0 || w.n <= 0) return;
    if (w.k == 0) {  // x · Wᵀ is the zero matrix
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < w.n; ++j)
                y[i * ldy + j] = beta == 0.0f ? 0.0f : beta * y[i * ldy + j];
        return;
    }
    const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(w.n) * w.k;
    parallel_for(ex, w.panels(), flops >= kParallelFlops, [&](int64_t p0, int64_t p1) {
        if (w.isa == CpuIsa::avx512)
            panel_gemm_avx512(m, w.n, w.k, x, ldx, w.data.get(), p0, p1, beta, y, ldy);
        else
            panel_gemm_avx2(m, w.n, w.k, x, ldx, w.data.get(), p0, p1, beta, y, ldy);
    });
}

}  // namespace dflash::cpu

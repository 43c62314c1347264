// Token sampling from rows of logits (Backend::sample_rows), the fp64 reference of the CUDA
// kernel. Tested by tests/ops/sampling_test.cpp.
#include "backend/sampling.h"

#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

// Checks shared with the CUDA op live here too: they say what the op expects.
void sample_rows(const Exec& ex, const Tensor& logits, const SampleParams& p,
                 const Tensor& uniforms, const Tensor& out) {
    check_cpu_f32(logits, "sample_rows", "logits");
    check_cpu_f32(uniforms, "sample_rows", "uniforms");
    DF_CHECK(logits.rank() == 2 && uniforms.numel() == logits.dim(0) && out.dtype() == DType::i32 &&
                 out.numel() == logits.dim(0),
             "sample_rows: logits {}, uniforms {}, out {}; expected [R, V], f32 [R] and i32 [R]",
             logits.describe(), uniforms.describe(), out.describe());
    DF_CHECK(p.temperature > 0 && p.top_k >= 0 && p.top_p > 0 && p.top_p <= 1,
             "sample_rows: temperature {} (> 0), top_k {} (>= 0), top_p {} (in (0, 1])",
             p.temperature, p.top_k, p.top_p);
    const int64_t rows = logits.dim(0), v = logits.dim(1);
    // Rows are independent and each is sampled whole by one thread, so the picks do not depend
    // on the thread count. A verify block samples ~16 rows of a 152K vocabulary: worth sharing.
    parallel_for(ex, rows, rows * v > 32768, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
            const std::span<const float> row(logits.f32() + r * v, static_cast<size_t>(v));
            const auto probs = sampling_distribution(row, p.temperature, p.top_k, p.top_p);
            out.i32()[r] = pick_from(probs, uniforms.f32()[r]);
        }
    });
}

}  // namespace dflash::cpu

// Token sampling from rows of logits (Backend::sample_rows), the fp64 reference of the CUDA
// kernel. Tested by tests/ops/sampling_test.cpp.
#include "backend/sampling.h"
#include "backend/op_shapes.h"

#include "backend/cpu/cpu_ops.h"

namespace dflash::cpu {

void sample_rows(const Exec& ex, const Tensor& logits, const SampleParams& p,
                 const Tensor& uniforms, const Tensor& out) {
    check_cpu_f32(logits, "sample_rows", "logits");
    check_cpu_f32(uniforms, "sample_rows", "uniforms");
    check_sample_rows_args(logits, p, uniforms, out);
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

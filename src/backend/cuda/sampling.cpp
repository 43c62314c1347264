// cuda::sample_rows: checks, the workspace, and the launch (kernels/sampling.cu).
// Tested by tests/cuda/sampling_cuda_test.cpp.
#include "backend/cuda/kernels/sampling.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_workspace.h"
#include "core/error.h"

namespace dflash::cuda {

void sample_rows(const Exec& ex, const Tensor& logits, const SampleParams& p,
                 const Tensor& uniforms, const Tensor& out) {
    for (const auto& [t, name] :
         {std::pair{&logits, "logits"}, std::pair{&uniforms, "uniforms"}, std::pair{&out, "out"}})
        check_device(ex, *t, "sample_rows", name);
    DF_CHECK(logits.dtype() == DType::f32 && logits.rank() == 2 && uniforms.dtype() == DType::f32 &&
                 uniforms.numel() == logits.dim(0) && out.dtype() == DType::i32 &&
                 out.numel() == logits.dim(0),
             "sample_rows: logits {}, uniforms {}, out {}; expected f32 [R, V], f32 [R], i32 [R]",
             logits.describe(), uniforms.describe(), out.describe());
    DF_CHECK(p.temperature > 0 && p.top_k >= 0 && p.top_p > 0 && p.top_p <= 1,
             "sample_rows: temperature {} (> 0), top_k {} (>= 0), top_p {} (in (0, 1])",
             p.temperature, p.top_k, p.top_p);
    const int64_t rows = logits.dim(0), vocab = logits.dim(1);
    DF_CHECK(rows * vocab <= INT32_MAX, "sample_rows: {} x {} logits exceed the sort's 32-bit size",
             rows, vocab);
    if (rows == 0) return;
    const bool restricted = (p.top_k > 0 && p.top_k < vocab) || p.top_p < 1.0f;
    const size_t bytes = kernels::sample_rows_workspace_bytes(rows, vocab, restricted);
    void* ws = bytes > 0 ? ex.scratch->take(bytes, "sample_rows sort buffers") : nullptr;
    kernels::sample_rows(static_cast<const float*>(logits.data()), rows, vocab, p.temperature,
                         p.top_k, p.top_p, static_cast<const float*>(uniforms.data()),
                         static_cast<int32_t*>(out.data()), ws, bytes, ex.stream);
}

}  // namespace dflash::cuda

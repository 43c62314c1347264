// cuda::sample_rows: checks, the workspace, and the launch (kernels/sampling.cu).
// Tested by tests/cuda/sampling_cuda_test.cpp.
#include "backend/cuda/kernels/sampling.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"
#include "core/error.h"

namespace dflash::cuda {

void sample_rows(const Exec& ex, const Tensor& logits, const SampleParams& p,
                 const Tensor& uniforms, const Tensor& out) {
    for (const auto& [t, name] :
         {std::pair{&logits, "logits"}, std::pair{&uniforms, "uniforms"}, std::pair{&out, "out"}})
        check_device(ex, *t, "sample_rows", name);
    check_sample_rows_args(logits, p, uniforms, out);
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

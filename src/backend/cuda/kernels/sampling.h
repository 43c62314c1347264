// Raw launchers of the sampling family (sampling.cpp holds the Tensor-level op). No fmt
// (Note [No fmt in .cu files]). Tested by tests/cuda/sampling_cuda_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// Bytes of device workspace sample_rows needs for `rows` x `vocab` logits (0 when neither top_k
// nor top_p restricts the distribution: no sort is needed then).
size_t sample_rows_workspace_bytes(int64_t rows, int64_t vocab, bool restricted);

// out[r] = the token u[r] picks from row r's sampling distribution (backend/sampling.h).
// restricted: top_k > 0 (and < vocab) or top_p < 1; then `ws` holds the bytes above.
void sample_rows(const float* logits, int64_t rows, int64_t vocab, float temperature, int64_t top_k,
                 float top_p, const float* u, int32_t* out, void* ws, size_t ws_bytes,
                 CUstream_st* stream);

}  // namespace dflash::cuda::kernels

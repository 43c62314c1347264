// Raw launchers of the embedding family (see embedding.cpp for the Tensor-level ops): gather of
// bf16 table rows, and the deterministic scatter-add of the backward (sort + segment reduce).
// No fmt (Note [No fmt in .cu files]). Tested by tests/cuda/embedding_cuda_test.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

struct CUstream_st;

namespace dflash::cuda::kernels {

// out[s, :] = table[ids[s], :] for s < n_ids; a row whose id lies outside [0, vocab) gets zeros
// (ids are validated on the host before upload; this only keeps a bad id from reading out of
// bounds).
void embedding_fwd(const uint16_t* table, int64_t vocab, int64_t dim, const int32_t* ids,
                   int64_t n_ids, uint16_t* out, CUstream_st* stream);

// Device workspace bytes embedding_bwd needs for n_ids ids over `vocab` rows.
size_t embedding_bwd_workspace_bytes(int64_t n_ids, int64_t vocab);
// dtable[ids[s], :] += dout[s, :] (f32 += bf16) for every s with a valid id. Positions sharing an
// id are summed in position order, one thread per column: the bits do not depend on the launch and
// equal the CPU reference's sequential sum. n_ids < 2^31.
void embedding_bwd(const int32_t* ids, int64_t n_ids, const uint16_t* dout, float* dtable,
                   int64_t vocab, int64_t dim, void* workspace, size_t workspace_bytes,
                   CUstream_st* stream);

}  // namespace dflash::cuda::kernels

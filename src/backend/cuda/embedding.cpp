// CUDA embedding family (backend/op_list.h: embedding_fwd, embedding_bwd): table bf16 [V, D], ids
// i32 [S] on the device, out / dout bf16 [S, D], dtable f32 [V, D]. The ids cannot be validated
// here (they live on the device): callers validate them on the host before upload, and the kernels
// skip (bwd) or zero (fwd) an id outside [0, V) instead of reading out of bounds. Tested by
// tests/cuda/embedding_cuda_test.cpp.
#include <limits>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/embedding.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

void check_shapes(const Exec& ex, const Tensor& table, const Tensor& ids, const Tensor& rows,
                  DType table_dtype, const char* op, const char* table_name,
                  const char* rows_name) {
    check_tensor(ex, table, table_dtype, op, table_name);
    check_tensor(ex, ids, DType::i32, op, "ids");
    check_tensor(ex, rows, DType::bf16, op, rows_name);
    check_embedding_shapes(table, ids, rows, op, table_name, rows_name);
    DF_CHECK(table.dim(0) < std::numeric_limits<int32_t>::max() &&
                 ids.numel() < std::numeric_limits<int32_t>::max(),
             "{}: {} rows and {} ids; both must stay below 2^31 - 1", op, table.dim(0),
             ids.numel());
}

}  // namespace

void embedding_fwd(const Exec& ex, const Tensor& table, const Tensor& ids, const Tensor& out) {
    check_shapes(ex, table, ids, out, DType::bf16, "embedding_fwd", "table", "out");
    if (out.numel() == 0) return;
    kernels::embedding_fwd(static_cast<const uint16_t*>(table.data()), table.dim(0), table.dim(1),
                           static_cast<const int32_t*>(ids.data()), ids.numel(),
                           static_cast<uint16_t*>(out.data()), ex.stream);
}

void embedding_bwd(const Exec& ex, const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
    check_shapes(ex, dtable, ids, dout, DType::f32, "embedding_bwd", "dtable", "dout");
    if (dout.numel() == 0) return;
    const int64_t n = ids.numel();
    const size_t bytes = kernels::embedding_bwd_workspace_bytes(n, dtable.dim(0));
    void* ws = ex.scratch->take(bytes, "embedding_bwd sort buffers");
    kernels::embedding_bwd(
        static_cast<const int32_t*>(ids.data()), n, static_cast<const uint16_t*>(dout.data()),
        static_cast<float*>(dtable.data()), dtable.dim(0), dtable.dim(1), ws, bytes, ex.stream);
}

}  // namespace dflash::cuda

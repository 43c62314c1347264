// Embedding gather (forward) and its scatter-add (backward) on fp32 tables.
// Tested by tests/ops/embedding_test.cpp.
#include <algorithm>
#include <cstring>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {
namespace {

// Columns per work item of the backward: wide enough to stream rows, narrow enough to share.
constexpr int64_t kColBlock = 64;

// Validates ids against the table before any thread starts (a bad id is reported once, from
// the calling thread) and names the first bad id by position.
void check_ids(const Tensor& ids, int64_t vocab, const char* op) {
    DF_CHECK(ids.dtype() == DType::i32 && ids.device().kind == DeviceKind::cpu,
             "{}: ids is {}, expected CPU i32 token ids", op, ids.describe());
    const int32_t* p = ids.i32();
    for (int64_t s = 0; s < ids.numel(); ++s) {
        DF_CHECK(p[s] >= 0 && p[s] < vocab,
                 "{}: ids[{}]={} is outside the vocabulary of {} rows (ids 0..{}); check the "
                 "tokenizer matches the model",
                 op, s, p[s], vocab, vocab - 1);
    }
}

// table/dtable [V, D] and out/dout holding S rows of D.
void check_shapes(const Tensor& table, const Tensor& ids, const Tensor& rows, const char* op,
                  const char* table_name, const char* rows_name) {
    check_cpu_f32(table, op, table_name);
    check_cpu_f32(rows, op, rows_name);
    check_embedding_shapes(table, ids, rows, op, table_name, rows_name);
}

}  // namespace

void embedding_fwd(const Exec& ex, const Tensor& table, const Tensor& ids, const Tensor& out) {
    check_shapes(table, ids, out, "embedding_fwd", "table", "out");
    check_ids(ids, table.dim(0), "embedding_fwd");
    const int64_t s_len = ids.numel();
    const int64_t d = table.dim(1);
    const float* tab = table.f32();
    const int32_t* id = ids.i32();
    float* o = out.f32();
    parallel_for(ex, s_len, s_len * d > 16384, [&](int64_t s0, int64_t s1) {
        for (int64_t s = s0; s < s1; ++s) {
            std::memcpy(o + s * d, tab + static_cast<int64_t>(id[s]) * d, sizeof(float) * d);
        }
    });
}

// Several positions may share an id, so rows of dtable are not independent. Each thread owns a
// block of columns and walks the positions in order: every element is summed by one thread in
// the same order whatever the thread count (no atomics, bitwise reproducible).
void embedding_bwd(const Exec& ex, const Tensor& ids, const Tensor& dout, const Tensor& dtable) {
    check_shapes(dtable, ids, dout, "embedding_bwd", "dtable", "dout");
    check_ids(ids, dtable.dim(0), "embedding_bwd");
    const int64_t s_len = ids.numel();
    const int64_t d = dtable.dim(1);
    const int64_t blocks = (d + kColBlock - 1) / kColBlock;
    const float* g = dout.f32();
    const int32_t* id = ids.i32();
    float* dt = dtable.f32();
    parallel_for(ex, blocks, s_len * d > 16384, [&](int64_t blk0, int64_t blk1) {
        for (int64_t blk = blk0; blk < blk1; ++blk) {
            const int64_t c0 = blk * kColBlock;
            const int64_t c1 = std::min(d, c0 + kColBlock);
            for (int64_t s = 0; s < s_len; ++s) {
                float* dst = dt + static_cast<int64_t>(id[s]) * d;
                const float* src = g + s * d;
                for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
            }
        }
    });
}

}  // namespace dflash::cpu

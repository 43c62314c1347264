// Top-K of each row over the vocabulary (semantics on Backend::topk_rows): largest first, ties in
// ascending index order, so the first index is argmax_rows' answer. Tested by
// tests/ops/topk_test.cpp.
#include <algorithm>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {

void topk_rows(const Exec& ex, const Tensor& x, const Tensor& values, const Tensor& indices) {
    check_cpu_f32(x, "topk_rows", "x");
    check_cpu_f32(values, "topk_rows", "values");
    check_topk_shapes(x, values, indices);
    const int64_t rows = x.dim(0), v = x.dim(1), k = values.dim(1);
    parallel_for(ex, rows, rows > 4, [&](int64_t i0, int64_t i1) {
        std::vector<int32_t> idx(v);
        for (int64_t i = i0; i < i1; ++i) {
            const float* row = x.f32() + i * v;
            std::iota(idx.begin(), idx.end(), 0);
            // A strict total order (value descending, then index ascending): the result does not
            // depend on the sort's own tie handling.
            std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t p, int32_t q) {
                return row[p] > row[q] || (row[p] == row[q] && p < q);
            });
            for (int64_t j = 0; j < k; ++j) {
                indices.i32()[i * k + j] = idx[j];
                values.f32()[i * k + j] = row[idx[j]];
            }
        }
    });
}

}  // namespace dflash::cpu

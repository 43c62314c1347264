// cpu::topk_rows: against a full sort of (value descending, index ascending) on awkward sizes with
// many ties, first index == argmax_rows, K == V, and shape errors.
#include <algorithm>
#include <array>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "support/test_util.h"

namespace dflash {
namespace {

TEST(TopK, MatchesStableSortWithTies) {
    Rng rng(9);
    for (const auto& [R, V, K] : std::vector<std::array<int64_t, 3>>{
             {1, 1, 1}, {3, 37, 5}, {4, 1000, 16}, {2, 17, 17}, {5, 300, 64}}) {
        HostTensor x({R, V});
        // Values on a coarse grid: many exact ties.
        for (int64_t i = 0; i < x.numel(); ++i)
            x.f32()[i] = static_cast<float>(static_cast<int>(rng.uniform_f64() * 7)) - 3.0f;
        HostTensor vals({R, K}), idx({R, K}, DType::i32), am({R}, DType::i32);
        cpu::topk_rows(cpu::PooledExec{2}, x, vals, idx);
        cpu::argmax_rows(cpu::PooledExec{1}, x, am);
        for (int64_t r = 0; r < R; ++r) {
            std::vector<int32_t> order(V);
            std::iota(order.begin(), order.end(), 0);
            const float* row = x.f32() + r * V;
            std::stable_sort(order.begin(), order.end(),
                             [&](int32_t p, int32_t q) { return row[p] > row[q]; });
            for (int64_t j = 0; j < K; ++j) {
                ASSERT_EQ(idx.i32()[r * K + j], order[j]) << "row " << r << " rank " << j;
                ASSERT_EQ(vals.f32()[r * K + j], row[order[j]]);
            }
            EXPECT_EQ(idx.i32()[r * K], am.i32()[r]);
        }
    }
}

TEST(TopK, ShapeErrors) {
    const cpu::PooledExec ex{1};
    HostTensor x({2, 5}), vals({2, 6}), idx({2, 6}, DType::i32);
    EXPECT_TRUE(test::has(test::error_of([&] { cpu::topk_rows(ex, x, vals, idx); }), "K=6"));
    HostTensor v3({2, 3}), i3f({2, 3});
    EXPECT_THROW(cpu::topk_rows(ex, x, v3, i3f), Error);
}

}  // namespace
}  // namespace dflash

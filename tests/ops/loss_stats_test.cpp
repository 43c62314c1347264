// The CPU loss_stats and argmax_rows (backend/cpu/loss_stats.cpp), the oracle of the CUDA ops,
// against sums written out here in double: weight-0 rows add nothing, counts land at r % P, the
// call accumulates onto what stats holds, any thread count gives the same bits; argmax takes
// the lowest index on ties and handles -inf rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "core/tensor.h"

namespace dflash {
namespace {

TEST(LossStats, SumsAndCountsAsDefined) {
    Rng rng(5);
    for (int64_t rows : {1, 13, 1000}) {
        for (int64_t period : {1, 7}) {
            HostTensor loss({rows}), weights({rows});
            HostTensor argmax({rows}, DType::i32), labels({rows}, DType::i32);
            for (int64_t r = 0; r < rows; ++r) {
                loss.f32()[r] = 4.0f * rng.uniform();
                weights.f32()[r] = r % 4 == 1 ? 0.0f : rng.uniform();
                labels.i32()[r] = static_cast<int32_t>(rng.below(9));
                argmax.i32()[r] = rng.uniform() < 0.5f ? labels.i32()[r] : int32_t(rng.below(9));
            }
            const LossStatsLayout lay{period};
            std::vector<double> want(static_cast<size_t>(lay.size()));
            for (int64_t k = 0; k < lay.size(); ++k) want[k] = static_cast<double>(k);
            for (int64_t r = 0; r < rows; ++r) {
                if (!(weights.f32()[r] > 0)) continue;
                want[LossStatsLayout::kLossSum] += double(weights.f32()[r]) * loss.f32()[r];
                want[LossStatsLayout::kWeightSum] += weights.f32()[r];
                want[lay.count(r % period)] += 1;
                if (argmax.i32()[r] == labels.i32()[r]) want[lay.correct(r % period)] += 1;
            }
            std::vector<HostTensor> got;
            for (int threads : {1, 3}) {
                const auto be = make_cpu_backend(threads);
                HostTensor stats({lay.size()});
                for (int64_t k = 0; k < lay.size(); ++k) stats.f32()[k] = static_cast<float>(k);
                be->loss_stats(loss, argmax, labels, weights, period, stats);
                for (int64_t k = 0; k < lay.size(); ++k)
                    EXPECT_NEAR(stats.f32()[k], want[k], 1e-5 * std::max(1.0, std::fabs(want[k])))
                        << "rows " << rows << " period " << period << " slot " << k;
                got.push_back(std::move(stats));
            }
            EXPECT_EQ(std::memcmp(got[0].f32(), got[1].f32(), got[0].nbytes()), 0);
        }
    }
}

TEST(LossStats, ArgmaxTakesTheLowestIndexOfTheMaximum) {
    const float inf = std::numeric_limits<float>::infinity();
    HostTensor x({4, 5});
    const float rows[4][5] = {
        {1, 3, 3, 2, 0}, {-inf, -inf, -inf, -inf, -inf}, {0, 0, 0, 0, 7}, {9, 1, 9, 9, -inf}};
    std::memcpy(x.f32(), rows, sizeof(rows));
    HostTensor out({4}, DType::i32);
    make_cpu_backend(2)->argmax_rows(x, out);
    EXPECT_EQ(out.i32()[0], 1);
    EXPECT_EQ(out.i32()[1], 0);
    EXPECT_EQ(out.i32()[2], 4);
    EXPECT_EQ(out.i32()[3], 0);
}

}  // namespace
}  // namespace dflash

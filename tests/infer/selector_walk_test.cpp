// The DFlash2 selector's walks (docs/formats.md "DFlash2 drafter directory") on hand-made lattices:
// the greedy walk follows the predecessor it chose (not the unary argmax), breaks ties to the
// lowest candidate index, and the sampled walk draws each slot from softmax(S / T) given the
// previous draw.
#include <cmath>
#include <map>

#include "infer/selector_walk.h"
#include "support/test_util.h"

namespace dflash {
namespace {

// P = 2 slots, K = 2 candidates. Slot 0: ids {10, 11}, U = {1, 0}. Slot 1: ids {20, 21},
// U = {0, 0}; from predecessor 0 (token 10) candidate 21 scores 2, from predecessor 1 candidate
// 20 scores 3.
CandidateLattice two_slots() {
    CandidateLattice l;
    l.P = 2;
    l.K = 2;
    l.ids = {10, 11, 20, 21};
    l.unary = {1, 0, 0, 0};
    l.pair = {0, 0, 0, 0,  // slot 0 (anchor: both rows alike)
              0, 2, 3, 0};
    return l;
}

TEST(SelectorWalk, GreedyFollowsItsOwnPredecessor) {
    CandidateLattice l = two_slots();
    SelectorPath p = greedy_walk(l);
    EXPECT_EQ(p.tokens, (std::vector<int32_t>{10, 21}));
    EXPECT_EQ(p.choice, (std::vector<int64_t>{0, 1}));
    // The anchor's edge decides slot 0: a pair score can overturn the unary order.
    l.pair[1] = l.pair[3] = 1.5f;
    p = greedy_walk(l);
    EXPECT_EQ(p.tokens, (std::vector<int32_t>{11, 20}));
}

TEST(SelectorWalk, GreedyTiesGoToTheLowestCandidateIndex) {
    CandidateLattice l = two_slots();
    l.unary = {0, 0, 5, 5};
    l.pair = {0, 0, 0, 0, 0, 0, 0, 0};
    const SelectorPath p = greedy_walk(l);
    EXPECT_EQ(p.choice, (std::vector<int64_t>{0, 0}));
}

TEST(SelectorWalk, SampledWalkDrawsFromSoftmaxGivenThePreviousDraw) {
    const CandidateLattice l = two_slots();
    const double T = 0.8;
    Rng rng(3);
    std::map<std::pair<int32_t, int32_t>, int64_t> counts;
    const int64_t n = 40000;
    for (int64_t i = 0; i < n; ++i) {
        const SelectorPath p = sampled_walk(l, T, rng);
        counts[{p.tokens[0], p.tokens[1]}] += 1;
        // q is what the draw used: slot 1's q depends on slot 0's choice.
        const double s0 = p.choice[0] == 0 ? 0.0 : 3.0, s1 = p.choice[0] == 0 ? 2.0 : 0.0;
        const double q0 = 1.0 / (1.0 + std::exp((s1 - s0) / T));
        ASSERT_NEAR(p.q[1][0], q0, 1e-12);
        const auto full = scatter_q(l, p, 1, 30);
        ASSERT_NEAR(full[20] + full[21], 1.0, 1e-12);
        ASSERT_EQ(full[10], 0.0);
    }
    const double a = 1.0 / (1.0 + std::exp(-1.0 / T));  // P(slot 0 = 10)
    const double b = 1.0 / (1.0 + std::exp(2.0 / T));   // P(20 | 10)
    const double c = 1.0 / (1.0 + std::exp(-3.0 / T));  // P(20 | 11)
    const std::map<std::pair<int32_t, int32_t>, double> want = {{{10, 20}, a * b},
                                                                {{10, 21}, a * (1 - b)},
                                                                {{11, 20}, (1 - a) * c},
                                                                {{11, 21}, (1 - a) * (1 - c)}};
    for (const auto& [k, pr] : want) {
        const double sd = std::sqrt(pr * (1 - pr) / n);
        EXPECT_NEAR(static_cast<double>(counts[k]) / n, pr, 5 * sd + 1e-4)
            << k.first << "," << k.second;
    }
}

}  // namespace
}  // namespace dflash

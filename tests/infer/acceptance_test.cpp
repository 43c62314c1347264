// The acceptance rule keeps the target's distribution: whatever the proposal, the first emitted
// token is distributed as the target's row 0 (chi-square, 0.1% significance).
#include "infer/acceptance.h"
#include "infer/sampler.h"
#include "support/test_util.h"

#include <cmath>

namespace dflash {
namespace {

// Chi-square statistic of observed counts against expected probabilities (cells with p > 0).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n) {
    double chi = 0;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] <= 0) {
            EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0 but was emitted";
            continue;
        }
        const double e = p[i] * n;
        chi += (counts[i] - e) * (counts[i] - e) / e;
    }
    return chi;
}

TEST(Acceptance, GreedyKeepsLongestMatchingPrefix) {
    const std::vector<int32_t> d = {3, 4, 5};
    EXPECT_EQ(verify_greedy(d, std::vector<int32_t>{3, 4, 5, 9}).accepted, 3);
    EXPECT_EQ(verify_greedy(d, std::vector<int32_t>{3, 4, 5, 9}).next, 9);
    EXPECT_EQ(verify_greedy(d, std::vector<int32_t>{3, 7, 5, 9}).accepted, 1);
    EXPECT_EQ(verify_greedy(d, std::vector<int32_t>{3, 7, 5, 9}).next, 7);
    EXPECT_EQ(verify_greedy(d, std::vector<int32_t>{1, 4, 5, 9}).accepted, 0);
}

// With 6 categories (5 degrees of freedom) the 0.1% critical value of chi-square is 20.52.
constexpr double kChi5 = 20.52;

TEST(Acceptance, FirstTokenFollowsTargetForOneHotDrafts) {
    const std::vector<double> p0 = {0.05, 0.3, 0.15, 0.0, 0.4, 0.1};
    const std::vector<double> p1 = {0.2, 0.2, 0.2, 0.2, 0.1, 0.1};
    Rng rng(1);
    for (int32_t draft : {1, 3, 4}) {  // a likely, an impossible and the most likely proposal
        std::vector<int64_t> counts(6, 0);
        const int64_t n = 60000;
        for (int64_t i = 0; i < n; ++i) {
            const std::vector<int32_t> d = {draft};
            auto v = verify_sampled(d, {p0, p1}, {}, rng);
            counts[v.accepted == 1 ? draft : v.next] += 1;
        }
        EXPECT_LT(chi_square(counts, p0, n), kChi5) << "draft " << draft;
    }
}

TEST(Acceptance, FirstTwoTokensFollowTargetForSampledDrafts) {
    // Position 1's target row depends on the first token, as it does in decoding.
    const std::vector<double> p0 = {0.1, 0.5, 0.4};
    const std::vector<std::vector<double>> p1 = {{0.7, 0.2, 0.1}, {0.1, 0.1, 0.8}, {0.3, 0.3, 0.4}};
    const std::vector<double> q = {0.6, 0.1, 0.3};  // a bad proposal
    Rng rng(2);
    std::vector<int64_t> counts(9, 0);
    const int64_t n = 80000;
    for (int64_t i = 0; i < n; ++i) {
        const int32_t d1 = sample_from(q, rng), d2 = sample_from(q, rng);
        const std::vector<int32_t> d = {d1, d2};
        auto v = verify_sampled(d, {p0, p1[d1], {1.0 / 3, 1.0 / 3, 1.0 / 3}}, {q, q}, rng);
        int32_t t1, t2;
        if (v.accepted == 0) {
            t1 = v.next;
            // The engine would now run a new step; emulate its first token with the target row.
            t2 = sample_from(p1[t1], rng);
        } else {
            t1 = d1;
            t2 = v.accepted >= 2 ? d2 : v.next;
        }
        counts[t1 * 3 + t2] += 1;
    }
    std::vector<double> joint(9);
    for (int a = 0; a < 3; ++a)
        for (int b = 0; b < 3; ++b) joint[a * 3 + b] = p0[a] * p1[a][b];
    // 8 degrees of freedom: 0.1% critical value 26.12.
    EXPECT_LT(chi_square(counts, joint, n), 26.12);
}

}  // namespace
}  // namespace dflash

// DFlash2 selector walks. Tested by tests/infer/selector_walk_test.cpp.
#include "infer/selector_walk.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dflash {

namespace {

// The predecessor index of slot p: slot 0's scores are the same for every i (the anchor).
int64_t predecessor(const SelectorPath& path, int64_t p) {
    return p == 0 ? 0 : path.choice[p - 1];
}

void take(SelectorPath& path, const CandidateLattice& lat, int64_t p, int64_t j) {
    path.choice.push_back(j);
    path.tokens.push_back(lat.ids[p * lat.K + j]);
}

}  // namespace

SelectorPath greedy_walk(const CandidateLattice& lat) {
    SelectorPath path;
    for (int64_t p = 0; p < lat.P; ++p) {
        const int64_t i = predecessor(path, p);
        int64_t best = 0;
        for (int64_t j = 1; j < lat.K; ++j)
            if (lat.score(p, i, j) > lat.score(p, i, best)) best = j;
        take(path, lat, p, best);
    }
    return path;
}

SelectorPath sampled_walk(const CandidateLattice& lat, double temperature, Rng& rng) {
    DF_CHECK(temperature > 0, "sampled selector walk with temperature {} (expected > 0)",
             temperature);
    SelectorPath path;
    for (int64_t p = 0; p < lat.P; ++p) {
        const int64_t i = predecessor(path, p);
        std::vector<double> q(lat.K);
        double top = -INFINITY;
        for (int64_t j = 0; j < lat.K; ++j) top = std::max(top, double{lat.score(p, i, j)});
        double sum = 0;
        for (int64_t j = 0; j < lat.K; ++j) {
            q[j] = std::exp((lat.score(p, i, j) - top) / temperature);
            sum += q[j];
        }
        for (double& v : q) v /= sum;
        // Inverse CDF with one uniform; the last candidate catches rounding at the top.
        const double u = rng.uniform_f64();
        int64_t j = 0;
        for (double c = q[0]; j + 1 < lat.K && u >= c; c += q[++j]) {
        }
        take(path, lat, p, j);
        path.q.push_back(std::move(q));
    }
    return path;
}

std::vector<double> scatter_q(const CandidateLattice& lat, const SelectorPath& path, int64_t p,
                              int64_t vocab) {
    std::vector<double> full(vocab, 0.0);
    for (int64_t j = 0; j < lat.K; ++j) full[lat.ids[p * lat.K + j]] += path.q[p][j];
    return full;
}

}  // namespace dflash

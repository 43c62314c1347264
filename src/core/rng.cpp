// Bulk draws from an Rng (see rng.h). Tested by tests/core/tensor_test.cpp.
#include "core/rng.h"

#include <algorithm>
#include <thread>
#include <vector>

namespace dflash {

void fill_normal(Rng& rng, float* v, int64_t n, float std, int threads) {
    // Below a few million values a thread costs more than it saves.
    constexpr int64_t kPerThread = int64_t{1} << 21;
    if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    const int64_t t = std::clamp<int64_t>(n / kPerThread, 1, threads);
    std::vector<std::thread> pool;
    for (int64_t k = 0; k < t; ++k) {
        const int64_t lo = n * k / t, hi = n * (k + 1) / t;
        auto fill = [&rng, v, lo, hi, std] {
            Rng r = rng;
            r.skip(2 * static_cast<uint64_t>(lo));
            for (int64_t i = lo; i < hi; ++i) v[i] = r.normal() * std;
        };
        if (k + 1 < t)
            pool.emplace_back(fill);
        else
            fill();
    }
    for (auto& th : pool) th.join();
    rng.skip(2 * static_cast<uint64_t>(n));
}

}  // namespace dflash

// fill_normal_hash (backend/op_list.h): x[i] = stddev * normal_hash(seed, i), the counter-based
// normal numbers of backend/noise_hash.h, over the backend's threads (each element's value does
// not depend on the split). Tested by tests/ops/normal_fill_test.cpp.
#include "backend/cpu/cpu_ops.h"
#include "backend/noise_hash.h"

namespace dflash::cpu {

void fill_normal_hash(const Exec& ex, const Tensor& x, uint64_t seed, float stddev) {
    check_cpu_f32(x, "fill_normal_hash", "x");
    float* px = x.f32();
    parallel_for(ex, x.numel(), x.numel() > 16384, [&](int64_t i0, int64_t i1) {
        // Whole pairs (one logarithm for two numbers), an odd element at either end alone.
        int64_t i = i0;
        if ((i & 1) != 0 && i < i1) {
            px[i] = stddev * normal_hash(seed, static_cast<uint64_t>(i));
            ++i;
        }
        for (; i + 1 < i1; i += 2) {
            float even, odd;
            normal_hash_pair(seed, static_cast<uint64_t>(i / 2), &even, &odd);
            px[i] = stddev * even;
            px[i + 1] = stddev * odd;
        }
        if (i < i1) px[i] = stddev * normal_hash(seed, static_cast<uint64_t>(i));
    });
}

}  // namespace dflash::cpu

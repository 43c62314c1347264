// add_uniform_noise (backend/op_list.h): x += a (2u - 1) with the counter-based numbers of
// backend/noise_hash.h. Tested by tests/ops/uniform_noise_test.cpp.
#include "backend/cpu/cpu_ops.h"
#include "backend/noise_hash.h"
#include "backend/op_shapes.h"

namespace dflash::cpu {

void add_uniform_noise(const Exec& ex, const Tensor& x, const Tensor& seed, float amplitude) {
    check_cpu_f32(x, "add_uniform_noise", "x");
    const uint64_t s = check_uniform_noise_args(x, seed);
    float* px = x.f32();
    parallel_for(ex, x.numel(), x.numel() > 32768, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i)
            px[i] += amplitude * (2.0f * uniform_hash01(s, static_cast<uint64_t>(i)) - 1.0f);
    });
}

}  // namespace dflash::cpu

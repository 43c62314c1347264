// cuda::dpace_weights against the CPU reference (backend/cpu/dpace_weights.cpp): blocks of 1, 4,
// 16 and 33 slots, up to 20000 rows, untrained slots (weight 0) anywhere, weights that carry a
// scale, alpha from 0.05 to 1; both compute in double, so they agree to 1e-6 relative.
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_ops.h"
#include "cuda/gemm_family_util.h"
#include "support/test_util.h"

namespace dflash {
namespace {

using test::to_device;

TEST(CudaDpaceWeights, MatchesCpu) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    auto cpu = make_cpu_backend(1);
    auto gpu = make_backend(DeviceKind::cuda, 0, 1);
    Rng rng(31);
    for (int64_t block : {1, 4, 16, 33}) {
        for (int64_t blocks : {1, 7, 1250}) {
            for (float alpha : {0.05f, 0.5f, 1.0f}) {
                const int64_t R = block * blocks;
                HostTensor ce({R}), w({R}), want({R}), got({R});
                for (int64_t i = 0; i < R; ++i) {
                    ce.f32()[i] = 6.0f * rng.uniform();
                    w.f32()[i] = rng.uniform() < 0.25f ? 0.0f : 0.5f + rng.uniform();
                }
                cpu->dpace_weights(ce, w, block, alpha, want);
                const DeviceTensor dce = to_device(*gpu, ce, DType::f32);
                const DeviceTensor dw = to_device(*gpu, w, DType::f32);
                DeviceTensor dout(*gpu, {R}, DType::f32);
                gpu->dpace_weights(dce, dw, block, alpha, dout);
                gpu->download(got, dout);
                for (int64_t i = 0; i < R; ++i)
                    ASSERT_NEAR(got.f32()[i], want.f32()[i], 1e-6 * (1.0 + want.f32()[i]))
                        << "block " << block << " blocks " << blocks << " alpha " << alpha
                        << " row " << i;
            }
        }
    }
}

}  // namespace
}  // namespace dflash

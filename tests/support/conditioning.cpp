// Tested through its users (tests/cuda/hybrid_target_cuda_test.cpp, dflash2_model_cuda_test.cpp).
#include "support/conditioning.h"

#include "core/rng.h"
#include "core/tensor.h"

namespace dflash::test {

void perturb_relative(ParamSet& ps, uint64_t seed, double rel) {
    Rng rng(seed);
    for (const Param& p : ps.params()) {
        HostTensor t = ps.read_f32(p.name);
        for (int64_t i = 0; i < t.numel(); ++i) {
            const double u = 2.0 * rng.uniform_f64() - 1.0;
            t.f32()[i] = static_cast<float>(t.f32()[i] * (1.0 + rel * u));
        }
        ps.write_f32(p.name, t.view());
    }
}

}  // namespace dflash::test

// D-PACE loss weights, the CPU reference (semantics: Backend::dpace_weights in backend/op_list.h;
// docs/training.md "D-PACE"). Tested by tests/ops/dpace_weights_test.cpp (against a hand
// computation) and as the oracle of tests/cuda/dpace_weights_cuda_test.cpp.
#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/op_shapes.h"

#include <cmath>

namespace dflash::cpu {

void dpace_weights(const Exec&, const Tensor& ce, const Tensor& weights, int64_t block, float alpha,
                   const Tensor& out) {
    check_cpu_f32(ce, "dpace_weights", "ce");
    check_cpu_f32(weights, "dpace_weights", "weights");
    check_cpu_f32(out, "dpace_weights", "out");
    const int64_t rows = check_dpace_weights_args(ce, weights, block, alpha, out);
    const float* l = ce.f32();
    const float* w = weights.f32();
    float* o = out.f32();
    const double a = alpha;
    for (int64_t b0 = 0; b0 < rows; b0 += block) {
        // Forward over the block: the survival products C_k; backward: their suffix sums over the
        // trained slots, the credit slot k gets for every later slot its success makes reachable.
        std::vector<double> c(static_cast<size_t>(block));
        double prod = 1.0;
        for (int64_t k = 0; k < block; ++k) {
            if (w[b0 + k] > 0.0f) prod *= (1.0 - a) * std::exp(-static_cast<double>(l[b0 + k])) + a;
            c[static_cast<size_t>(k)] = prod;
        }
        double tail = 0.0;
        for (int64_t k = block - 1; k >= 0; --k) {
            const bool trained = w[b0 + k] > 0.0f;
            if (trained) tail += c[static_cast<size_t>(k)];
            o[b0 + k] = trained ? static_cast<float>(static_cast<double>(w[b0 + k]) * tail) : 0.0f;
        }
    }
}

}  // namespace dflash::cpu

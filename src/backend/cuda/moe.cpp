// CUDA mixture of experts: not written yet (the CPU reference, backend/cpu/moe.cpp, came first).
// Both ops refuse to run with an error naming the op.
#include "backend/cuda/cuda_ops.h"
#include "core/error.h"

namespace dflash::cuda {

void moe_route(const Exec&, const Tensor&, const MoeRouting&, const Tensor&, const Tensor&) {
    DF_CHECK(false, "moe_route: not implemented on CUDA yet");
}

void moe_experts(const Exec&, const Tensor&, const Tensor&, const Tensor&, const MoeExperts&,
                 const Tensor&) {
    DF_CHECK(false, "moe_experts: not implemented on CUDA yet");
}

}  // namespace dflash::cuda

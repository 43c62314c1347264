// cuda::dpace_weights: checks and dispatch (semantics: Backend::dpace_weights in
// backend/op_list.h; the CPU reference is backend/cpu/dpace_weights.cpp). Tested by
// tests/cuda/dpace_weights_cuda_test.cpp.
#include "backend/cuda/kernels/dpace_weights.h"
#include "backend/backend.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {

void dpace_weights(const Exec& ex, const Tensor& ce, const Tensor& weights, int64_t block,
                   float alpha, const Tensor& out) {
    check_device(ex, ce, "dpace_weights", "ce");
    check_device(ex, weights, "dpace_weights", "weights");
    check_device(ex, out, "dpace_weights", "out");
    const int64_t rows = check_dpace_weights_args(ce, weights, block, alpha, out);
    if (rows == 0) return;
    dpace_weights_rows(ce.f32(), weights.f32(), rows, block, alpha, out.f32(), ex.stream);
}

}  // namespace dflash::cuda

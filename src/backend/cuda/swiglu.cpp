// CUDA SwiGLU family (backend/op_list.h: swiglu_fwd, swiglu_bwd): gate, up, out, dout, dgate, dup
// bf16 of one shape [R, I]. Tested by tests/cuda/swiglu_cuda_test.cpp.
#include "backend/cuda/kernels/swiglu.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

const uint16_t* cptr(const Tensor& t) {
    return static_cast<const uint16_t*>(t.data());
}
uint16_t* ptr(const Tensor& t) {
    return static_cast<uint16_t*>(t.data());
}

}  // namespace

void swiglu_fwd(const Exec& ex, const Tensor& gate, const Tensor& up, const Tensor& out) {
    check_tensor(ex, gate, DType::bf16, "swiglu_fwd", "gate");
    check_tensor(ex, up, DType::bf16, "swiglu_fwd", "up");
    check_tensor(ex, out, DType::bf16, "swiglu_fwd", "out");
    check_swiglu_fwd_shapes(gate, up, out);
    if (gate.empty()) return;
    kernels::swiglu_fwd(cptr(gate), cptr(up), ptr(out), gate.numel(), ex.stream);
}

void swiglu_bwd(const Exec& ex, const Tensor& dout, const Tensor& gate, const Tensor& up,
                const Tensor& dgate, const Tensor& dup) {
    check_tensor(ex, dout, DType::bf16, "swiglu_bwd", "dout");
    check_tensor(ex, gate, DType::bf16, "swiglu_bwd", "gate");
    check_tensor(ex, up, DType::bf16, "swiglu_bwd", "up");
    check_tensor(ex, dgate, DType::bf16, "swiglu_bwd", "dgate");
    check_tensor(ex, dup, DType::bf16, "swiglu_bwd", "dup");
    check_swiglu_bwd_shapes(dout, gate, up, dgate, dup);
    if (gate.empty()) return;
    kernels::swiglu_bwd(cptr(dout), cptr(gate), cptr(up), ptr(dgate), ptr(dup), gate.numel(),
                        ex.stream);
}

}  // namespace dflash::cuda

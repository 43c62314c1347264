// CUDA SwiGLU family (backend.h: swiglu_fwd, swiglu_bwd): gate, up, out, dout, dgate, dup bf16 of
// one shape [R, I]. Tested by tests/cuda/swiglu_cuda_test.cpp.
#include "backend/cuda/kernels/swiglu.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"

namespace dflash::cuda {
namespace {

void check_like(const Exec& ex, const Tensor& t, const Tensor& gate, const char* op,
                const char* name) {
    check_tensor(ex, t, DType::bf16, op, name);
    check_same_shape(t, gate, op, name, "gate");
}

const uint16_t* cptr(const Tensor& t) {
    return static_cast<const uint16_t*>(t.data());
}
uint16_t* ptr(const Tensor& t) {
    return static_cast<uint16_t*>(t.data());
}

}  // namespace

void swiglu_fwd(const Exec& ex, const Tensor& gate, const Tensor& up, const Tensor& out) {
    check_like(ex, gate, gate, "swiglu_fwd", "gate");
    check_like(ex, up, gate, "swiglu_fwd", "up");
    check_like(ex, out, gate, "swiglu_fwd", "out");
    if (gate.empty()) return;
    kernels::swiglu_fwd(cptr(gate), cptr(up), ptr(out), gate.numel(), ex.stream);
}

void swiglu_bwd(const Exec& ex, const Tensor& dout, const Tensor& gate, const Tensor& up,
                const Tensor& dgate, const Tensor& dup) {
    check_like(ex, gate, gate, "swiglu_bwd", "gate");
    check_like(ex, dout, gate, "swiglu_bwd", "dout");
    check_like(ex, up, gate, "swiglu_bwd", "up");
    check_like(ex, dgate, gate, "swiglu_bwd", "dgate");
    check_like(ex, dup, gate, "swiglu_bwd", "dup");
    if (gate.empty()) return;
    kernels::swiglu_bwd(cptr(dout), cptr(gate), cptr(up), ptr(dgate), ptr(dup), gate.numel(),
                        ex.stream);
}

}  // namespace dflash::cuda

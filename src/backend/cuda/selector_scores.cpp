// CUDA selector pair scores (backend/op_list.h: selector_scores_fwd, selector_scores_bwd): z,
// codebooks and dz bf16; ids i32; scores, dscores, da, dbc f32. Tested by
// tests/cuda/selector_scores_cuda_test.cpp.
#include "backend/cuda/kernels/selector_scores.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/op_checks.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

const uint16_t* cptr(const Tensor& t) {
    return static_cast<const uint16_t*>(t.data());
}

void check_inputs(const Exec& ex, const Tensor& z, const Tensor& pred, const Tensor& cand,
                  const Tensor& a, const Tensor& bc, const Tensor& scores, const char* op) {
    check_tensor(ex, z, DType::bf16, op, "z");
    check_tensor(ex, pred, DType::i32, op, "pred");
    check_tensor(ex, cand, DType::i32, op, "cand");
    check_tensor(ex, a, DType::bf16, op, "predecessor codebook");
    check_tensor(ex, bc, DType::bf16, op, "successor codebook");
    check_tensor(ex, scores, DType::f32, op, "scores");
}

kernels::SelectorShape shape_of(const SelectorDims& d) {
    return kernels::SelectorShape{d.P, d.Kp, d.K, d.r, d.V};
}

}  // namespace

void selector_scores_fwd(const Exec& ex, const Tensor& z, const Tensor& pred, const Tensor& cand,
                         const Tensor& a, const Tensor& bc, const Tensor& out) {
    check_inputs(ex, z, pred, cand, a, bc, out, "selector_scores_fwd");
    const auto s = shape_of(check_selector_scores_fwd_shapes(z, pred, cand, a, bc, out));
    kernels::selector_scores_fwd(cptr(z), pred.i32(), cand.i32(), cptr(a), cptr(bc), out.f32(), s,
                                 ex.stream);
}

void selector_scores_bwd(const Exec& ex, const Tensor& dscores, const Tensor& z, const Tensor& pred,
                         const Tensor& cand, const Tensor& a, const Tensor& bc, const Tensor& dz,
                         const Tensor& da, const Tensor& dbc) {
    constexpr const char* op = "selector_scores_bwd";
    check_inputs(ex, z, pred, cand, a, bc, dscores, op);
    check_tensor(ex, dz, DType::bf16, op, "dz");
    check_tensor(ex, da, DType::f32, op, "dA");
    check_tensor(ex, dbc, DType::f32, op, "dB");
    const auto s =
        shape_of(check_selector_scores_bwd_shapes(dscores, z, pred, cand, a, bc, dz, da, dbc));
    kernels::selector_scores_bwd(dscores.f32(), cptr(z), pred.i32(), cand.i32(), cptr(a), cptr(bc),
                                 static_cast<uint16_t*>(dz.data()), da.f32(), dbc.f32(), s,
                                 ex.stream);
}

}  // namespace dflash::cuda

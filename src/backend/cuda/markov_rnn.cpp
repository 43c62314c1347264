// CUDA rnn Markov head recurrence (backend/op_list.h: markov_rnn_fwd, markov_rnn_bwd): pre, bias,
// j, out, dout, dact, s_prev bf16; act and dbias f32. Tested by
// tests/cuda/markov_rnn_cuda_test.cpp.
#include "backend/cuda/kernels/markov_rnn.h"
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

// The kernels keep 4r floats of a block in shared memory (48 KiB without opting in).
constexpr int64_t kMaxRank = 3072;

kernels::MarkovRnnShape shape_of(const MarkovRnnDims& d, int64_t block_size, const char* op) {
    DF_CHECK(d.r <= kMaxRank, "{}: rank {} is above the CUDA kernel's limit {}", op, d.r, kMaxRank);
    return kernels::MarkovRnnShape{d.R, d.r, d.C, block_size};
}

}  // namespace

void markov_rnn_fwd(const Exec& ex, const Tensor& pre, const Tensor& bias, const Tensor& j,
                    int64_t block_size, const Tensor& act, const Tensor& out) {
    constexpr const char* op = "markov_rnn_fwd";
    check_tensor(ex, pre, DType::bf16, op, "pre");
    check_tensor(ex, bias, DType::bf16, op, "bias");
    check_tensor(ex, j, DType::bf16, op, "j");
    check_tensor(ex, act, DType::f32, op, "act");
    check_tensor(ex, out, DType::bf16, op, "out");
    const MarkovRnnDims d = check_markov_rnn_fwd_shapes(pre, bias, j, block_size, act, out);
    kernels::markov_rnn_fwd(cptr(pre), cptr(bias), cptr(j), act.f32(), ptr(out),
                            shape_of(d, block_size, op), ex.stream);
}

void markov_rnn_bwd(const Exec& ex, const Tensor& dout, const Tensor& act, const Tensor& j,
                    int64_t block_size, const Tensor& dact, const Tensor& dbias,
                    const Tensor& s_prev) {
    constexpr const char* op = "markov_rnn_bwd";
    check_tensor(ex, dout, DType::bf16, op, "dout");
    check_tensor(ex, act, DType::f32, op, "act");
    check_tensor(ex, j, DType::bf16, op, "j");
    check_tensor(ex, dact, DType::bf16, op, "dact");
    check_tensor(ex, dbias, DType::f32, op, "dbias");
    check_tensor(ex, s_prev, DType::bf16, op, "s_prev");
    const MarkovRnnDims d =
        check_markov_rnn_bwd_shapes(dout, act, j, block_size, dact, dbias, s_prev);
    kernels::markov_rnn_bwd(cptr(dout), act.f32(), cptr(j), ptr(dact), dbias.f32(), ptr(s_prev),
                            shape_of(d, block_size, op), ex.stream);
}

}  // namespace dflash::cuda

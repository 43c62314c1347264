// CUDA Gated DeltaNet (backend/op_list.h, "Gated DeltaNet"): conv inputs / outputs / weights,
// b, a, z, w and y bf16; the conv state, q, k, v, g, beta, the recurrent state and o f32; a_log
// and dt_bias f32 or bf16; count i32 on the device. Forward only (the target is frozen while a
// drafter trains). The kernels are in kernels/gdn.cu and kernels/gdn_chunked.cu; the chunked
// rule's temporaries come from the op workspace (ex.scratch). Tested by
// tests/cuda/gdn_cuda_test.cpp.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/gdn.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();

void check_fits_int(int64_t n, const char* op, const char* what) {
    DF_CHECK(n < kMaxInt, "{}: {} = {} is too large for the kernels' 32-bit indices", op, what, n);
}

gdn::RuleArgs rule_args(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                        const Tensor& beta, const Tensor& state, const Tensor& o,
                        const GdnDims& d) {
    gdn::RuleArgs a;
    a.q = q.f32();
    a.k = k.f32();
    a.v = v.f32();
    a.g = g.f32();
    a.beta = beta.f32();
    a.state = state.f32();
    a.o = o.empty() ? nullptr : o.f32();
    a.S = static_cast<int>(d.S);
    a.Hk = static_cast<int>(d.Hk);
    a.dk = static_cast<int>(d.dk);
    a.Hv = static_cast<int>(d.Hv);
    a.dv = static_cast<int>(d.dv);
    return a;
}

void check_rule_tensors(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& g, const Tensor& beta, const Tensor& state, const Tensor& o,
                        const char* op) {
    check_tensor(ex, q, DType::f32, op, "q");
    check_tensor(ex, k, DType::f32, op, "k");
    check_tensor(ex, v, DType::f32, op, "v");
    check_tensor(ex, g, DType::f32, op, "g");
    check_tensor(ex, beta, DType::f32, op, "beta");
    check_tensor(ex, state, DType::f32, op, "state");
    check_tensor(ex, o, DType::f32, op, "o");
}

void check_rule_sizes(const GdnDims& d, const char* op) {
    check_fits_int(d.S * d.Hv * std::max(d.dk, d.dv), op, "S * Hv * max(dk, dv)");
    check_fits_int(d.Hv * d.dk * d.dv, op, "the state's elements");
}

}  // namespace

void gdn_conv(const Exec& ex, const Tensor& x, const Tensor& w, const Tensor& state,
              const Tensor& y) {
    constexpr const char* op = "gdn_conv";
    check_tensor(ex, x, DType::bf16, op, "x");
    check_tensor(ex, w, DType::bf16, op, "w");
    check_tensor(ex, state, DType::f32, op, "state");
    check_tensor(ex, y, DType::bf16, op, "y");
    const GdnConvDims d = check_gdn_conv_shapes(x, w, state, y);
    check_fits_int(d.C * d.K, op, "C * K");
    gdn::conv(x.bf16(), w.bf16(), state.f32(), y.bf16(), d.S, static_cast<int>(d.C),
              static_cast<int>(d.K), ex.stream);
}

void gdn_conv_advance(const Exec& ex, const Tensor& state, const Tensor& x, const Tensor& count) {
    constexpr const char* op = "gdn_conv_advance";
    check_tensor(ex, state, DType::f32, op, "state");
    check_tensor(ex, x, DType::bf16, op, "x");
    check_tensor(ex, count, DType::i32, op, "count");
    const GdnConvDims d = check_gdn_conv_advance_shapes(state, x, count);
    check_fits_int(d.S * d.C, op, "S * C");
    gdn::conv_advance(state.f32(), x.empty() ? nullptr : x.bf16(), count.i32(), d.S,
                      static_cast<int>(d.C), static_cast<int>(d.K), ex.stream);
}

void gdn_prepare(const Exec& ex, const Tensor& conv_out, const Tensor& b, const Tensor& a,
                 const Tensor& a_log, const Tensor& dt_bias, const Tensor& q, const Tensor& k,
                 const Tensor& v, const Tensor& g, const Tensor& beta) {
    constexpr const char* op = "gdn_prepare";
    check_tensor(ex, conv_out, DType::bf16, op, "conv_out");
    check_tensor(ex, b, DType::bf16, op, "b");
    check_tensor(ex, a, DType::bf16, op, "a");
    check_device(ex, a_log, op, "a_log");
    check_device(ex, dt_bias, op, "dt_bias");
    DF_CHECK(a_log.dtype() == DType::f32 || a_log.dtype() == DType::bf16,
             "{}: a_log is {}, expected f32 or bf16", op, a_log.describe());
    DF_CHECK(dt_bias.dtype() == DType::f32 || dt_bias.dtype() == DType::bf16,
             "{}: dt_bias is {}, expected f32 or bf16", op, dt_bias.describe());
    check_tensor(ex, q, DType::f32, op, "q");
    check_tensor(ex, k, DType::f32, op, "k");
    check_tensor(ex, v, DType::f32, op, "v");
    check_tensor(ex, g, DType::f32, op, "g");
    check_tensor(ex, beta, DType::f32, op, "beta");
    const GdnDims d = check_gdn_prepare_shapes(conv_out, b, a, a_log, dt_bias, q, k, v, g, beta);
    check_fits_int(d.S, op, "S");
    check_fits_int(2 * d.Hk * d.dk + d.Hv * d.dv, op, "C");
    gdn::PrepareArgs p;
    p.conv_out = conv_out.bf16();
    p.b = b.bf16();
    p.a = a.bf16();
    p.a_log = a_log.data();
    p.dt_bias = dt_bias.data();
    p.a_log_bf16 = a_log.dtype() == DType::bf16;
    p.dt_bias_bf16 = dt_bias.dtype() == DType::bf16;
    p.q = q.f32();
    p.k = k.f32();
    p.v = v.f32();
    p.g = g.f32();
    p.beta = beta.f32();
    p.S = static_cast<int>(d.S);
    p.Hk = static_cast<int>(d.Hk);
    p.dk = static_cast<int>(d.dk);
    p.Hv = static_cast<int>(d.Hv);
    p.dv = static_cast<int>(d.dv);
    gdn::prepare(p, ex.stream);
}

void gdn_chunked(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                 const Tensor& beta, const Tensor& state, const Tensor& o) {
    constexpr const char* op = "gdn_chunked";
    check_rule_tensors(ex, q, k, v, g, beta, state, o, op);
    const GdnDims d = check_gdn_rule_shapes(q, k, v, g, beta, state, o, Tensor{}, false, op);
    check_rule_sizes(d, op);
    DF_CHECK(d.dk <= gdn::kMaxChunkedDim && d.dv <= gdn::kMaxChunkedDim && d.dk % 4 == 0,
             "{}: dk={} and dv={} must be at most {} and dk a multiple of 4 for the CUDA kernel",
             op, d.dk, d.dv, gdn::kMaxChunkedDim);
    if (d.S == 0) return;
    DF_CHECK(ex.scratch != nullptr, "{}: the Exec has no op workspace", op);
    const gdn::RuleArgs a = rule_args(q, k, v, g, beta, state, o, d);
    const size_t bytes = gdn::chunked_scratch_bytes(a.S, a.Hv, a.dk, a.dv);
    void* mem = ex.scratch->take(bytes, "gdn_chunked per-chunk matrices (one segment)");
    gdn::chunked(a, mem, ex.stream);
}

void gdn_recurrent(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& g, const Tensor& beta, const Tensor& state, const Tensor& o,
                   const Tensor& count) {
    constexpr const char* op = "gdn_recurrent";
    check_rule_tensors(ex, q, k, v, g, beta, state, o, op);
    check_tensor(ex, count, DType::i32, op, "count");
    const GdnDims d = check_gdn_rule_shapes(q, k, v, g, beta, state, o, count, true, op);
    check_rule_sizes(d, op);
    DF_CHECK(d.dk <= gdn::kMaxRecurrentKeyDim, "{}: dk={} is more than the CUDA kernel's {}", op,
             d.dk, gdn::kMaxRecurrentKeyDim);
    gdn::RuleArgs a = rule_args(q, k, v, g, beta, state, o, d);
    a.count = count.empty() ? nullptr : count.i32();
    gdn::recurrent(a, ex.stream);
}

void gdn_gated_norm(const Exec& ex, const Tensor& o, const Tensor& z, const Tensor& w, float eps,
                    const Tensor& y) {
    constexpr const char* op = "gdn_gated_norm";
    check_tensor(ex, o, DType::f32, op, "o");
    check_tensor(ex, z, DType::bf16, op, "z");
    check_tensor(ex, w, DType::bf16, op, "w");
    check_tensor(ex, y, DType::bf16, op, "y");
    const GdnDims d = check_gdn_gated_norm_shapes(o, z, w, eps, y);
    check_fits_int(d.dv, op, "dv");
    gdn::gated_norm(o.f32(), z.bf16(), w.bf16(), eps, y.bf16(), d.S * d.Hv, static_cast<int>(d.dv),
                    ex.stream);
}

}  // namespace dflash::cuda

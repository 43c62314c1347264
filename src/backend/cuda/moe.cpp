// CUDA mixture of experts (backend/op_list.h: moe_route, moe_experts): logits and weights f32,
// expert ids i32, x / out / the expert weights and their biases bf16 (or the weights MXFP4, u8
// blocks and scales decoded in the GEMMs' tile loads), fp32 accumulation. The
// kernels (sort, grouped GEMMs, gather) are in kernels/moe.cu and kernels/moe_grouped.cu; their
// temporaries come from the op workspace (ex.scratch). Tested by tests/cuda/moe_cuda_test.cpp.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/moe.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"

namespace dflash::cuda {
namespace {

const uint16_t* bf16_or_null(const Tensor& t) {
    return t.empty() ? nullptr : t.bf16();
}

}  // namespace

void moe_route(const Exec& ex, const Tensor& logits, const MoeRouting& routing,
               const Tensor& experts, const Tensor& weights) {
    constexpr const char* op = "moe_route";
    check_tensor(ex, logits, DType::f32, op, "logits");
    check_tensor(ex, experts, DType::i32, op, "experts");
    check_tensor(ex, weights, DType::f32, op, "weights");
    const MoeRouteDims d = check_moe_route_shapes(logits, routing, experts, weights);
    DF_CHECK(d.k <= moe::kMaxK, "{}: k={} is more than the CUDA kernel's {} picks per row", op, d.k,
             moe::kMaxK);
    DF_CHECK(d.R < std::numeric_limits<int32_t>::max() && d.E < std::numeric_limits<int32_t>::max(),
             "{}: logits {} is too large for the kernel's 32-bit indices", op, logits.describe());
    moe::route(logits.f32(), static_cast<int>(d.R), static_cast<int>(d.E), static_cast<int>(d.k),
               routing.kind == MoeRouterKind::softmax_topk ? moe::kSoftmaxTopk : moe::kTopkSoftmax,
               routing.normalize, experts.i32(), weights.f32(), ex.stream);
}

void moe_experts(const Exec& ex, const Tensor& x, const Tensor& experts, const Tensor& weights,
                 const MoeExperts& w, const Tensor& out) {
    constexpr const char* op = "moe_experts";
    check_tensor(ex, x, DType::bf16, op, "x");
    check_tensor(ex, experts, DType::i32, op, "experts");
    check_tensor(ex, weights, DType::f32, op, "weights");
    check_tensor(ex, w.gate_up, DType::bf16, op, "gate_up");
    check_tensor(ex, w.gate_up_bias, DType::bf16, op, "gate_up_bias");
    check_tensor(ex, w.down, DType::bf16, op, "down");
    check_tensor(ex, w.down_bias, DType::bf16, op, "down_bias");
    check_tensor(ex, w.gate_up_blocks, DType::u8, op, "gate_up_blocks");
    check_tensor(ex, w.gate_up_scales, DType::u8, op, "gate_up_scales");
    check_tensor(ex, w.down_blocks, DType::u8, op, "down_blocks");
    check_tensor(ex, w.down_scales, DType::u8, op, "down_scales");
    check_tensor(ex, out, DType::bf16, op, "out");
    const MoeExpertsDims d = check_moe_experts_shapes(x, experts, weights, w, out);
    // The weight-tile loads read 4 bytes of codes at once (kernels/moe.h: GroupedGemmArgs).
    DF_CHECK(!w.mxfp4() || (reinterpret_cast<uintptr_t>(w.gate_up_blocks.data()) % 4 == 0 &&
                            reinterpret_cast<uintptr_t>(w.down_blocks.data()) % 4 == 0),
             "{}: MXFP4 blocks {} / {} are not 4-byte aligned", op, w.gate_up_blocks.describe(),
             w.down_blocks.describe());
    DF_CHECK(d.E <= moe::kMaxExperts, "{}: E={} experts is more than the CUDA sort's {}", op, d.E,
             moe::kMaxExperts);
    constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
    DF_CHECK(d.R * d.k < kMax && d.D < kMax && d.I < kMax &&
                 d.R * d.k * std::max(d.D, d.I) < (int64_t{1} << 62),
             "{}: R={} k={} D={} I={} is too large for the kernels' 32-bit pair indices", op, d.R,
             d.k, d.D, d.I);
    if (d.R == 0) return;
    DF_CHECK(ex.scratch != nullptr, "{}: the Exec has no op workspace", op);
    // Rows are independent (one reduction order per row whatever the group size), so when the
    // temporaries of all R rows do not fit the workspace the op runs over row slices that do, with
    // the same bits: a 8192-token prefill of a 256-expert model needs ~336 MB at once.
    int64_t slice = d.R;
    const auto bytes_for = [&](int64_t rows) {
        return moe::experts_scratch_bytes(rows * d.k, d.E, d.I, d.D);
    };
    if (bytes_for(slice) > ex.scratch->available()) {
        int64_t lo = 0, hi = d.R;  // the largest slice that fits: lo fits (or is 0), hi does not
        while (hi - lo > 1) {
            const int64_t mid = lo + (hi - lo) / 2;
            (bytes_for(mid) <= ex.scratch->available() ? lo : hi) = mid;
        }
        slice = std::max<int64_t>(lo, 1);  // 0 rows fit: take() below names the shortfall
    }
    void* mem = ex.scratch->take(bytes_for(slice),
                                 "moe_experts sort buffers, activations and expert outputs");
    const moe::ExpertsScratch s = moe::carve_experts_scratch(mem, slice * d.k, d.E, d.I, d.D);
    moe::ExpertsArgs a;
    if (w.mxfp4()) {
        a.gate_up_blocks = w.gate_up_blocks.u8();
        a.gate_up_scales = w.gate_up_scales.u8();
        a.down_blocks = w.down_blocks.u8();
        a.down_scales = w.down_scales.u8();
    } else {
        a.gate_up = w.gate_up.bf16();
        a.down = w.down.bf16();
    }
    a.gate_up_bias = bf16_or_null(w.gate_up_bias);
    a.down_bias = bf16_or_null(w.down_bias);
    a.dim = static_cast<int>(d.D);
    a.k = static_cast<int>(d.k);
    a.experts = static_cast<int>(d.E);
    a.inter = static_cast<int>(d.I);
    a.activation = w.activation == MoeActivation::swiglu ? moe::kSwiglu : moe::kClampedSwiglu;
    a.limit = w.limit;
    a.alpha = w.alpha;
    for (int64_t r0 = 0; r0 < d.R; r0 += slice) {
        const int64_t rows = std::min(slice, d.R - r0);
        a.x = x.bf16() + r0 * d.D;
        a.ids = experts.i32() + r0 * d.k;
        a.weights = weights.f32() + r0 * d.k;
        a.out = out.bf16() + r0 * d.D;
        a.rows = static_cast<int>(rows);
        moe::experts(a, s, ex.stream);
    }
}

}  // namespace dflash::cuda

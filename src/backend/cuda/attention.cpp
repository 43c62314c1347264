// CUDA attention at the Tensor level: checks dtypes, devices and the kernels' limits (the shapes
// and the mask's sizes: check_attention_*_shapes in backend/op_shapes.h, shared with the CPU
// reference), takes the kernels' temporaries from ex.scratch and calls the raw launchers of
// kernels/attention.h. Built by the C++ compiler.
// Tested by tests/cuda/attention_cuda_test.cpp against the CPU backend.
//
// Paths: a causal or full mask with at most kDecodeMaxQueries queries (decoding, verifying)
// takes the split-KV decode kernel; everything else the FlashAttention-2 kernel. Both skip the
// key tiles below a causal window and add the sinks to the final denominators (the decode path
// at the merge of its splits); the backward takes the window, not sinks (op_shapes). Values that
// live in device memory (kv_len, anchors) are never read here: anchors above ctx_len and kv_len
// outside [0, capacity] cannot be rejected, and are clamped on the device (attention_tiles.h).
#include <climits>
#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/op_checks.h"
#include "backend/cuda/op_workspace.h"
#include "backend/op_shapes.h"
#include "core/error.h"

namespace dflash::cuda {
namespace {

constexpr int64_t kDecodeMaxQueries = 16;
constexpr int64_t kMaxRows = INT_MAX / 2;  // row indices are int on the device

void check_heads_tensor(const Exec& ex, const Tensor& t, const char* op, const char* name) {
    check_tensor(ex, t, DType::bf16, op, name);
    DF_CHECK(reinterpret_cast<uintptr_t>(t.data()) % 16 == 0,
             "{}: {} ({}) is not 16-byte aligned, which the kernels' vector loads need", op, name,
             t.describe());
}

// What the kernels support beyond the op's shape contract (check_attention_*_shapes).
void check_kernel_limits(const AttentionDims& d, const Tensor& q, const Tensor& k, const char* op) {
    DF_CHECK(attn::head_dim_supported(static_cast<int>(d.dh)),
             "{}: head dim {} has no CUDA kernel; supported head dims are 64, 128 and 256 (q {})",
             op, d.dh, q.describe());
    DF_CHECK(d.sq <= kMaxRows && d.sk <= kMaxRows && d.h <= 65535,
             "{}: q {} / k {} exceed the kernels' index range (rows < 2^30, heads < 65536)", op,
             q.describe(), k.describe());
}

// The mask as the kernels take it; its tensors' values stay on the device.
attn::MaskArgs mask_args(const Exec& ex, const AttnMask& m, const AttentionDims& d,
                         const char* op) {
    attn::MaskArgs a;
    a.sq = static_cast<int>(d.sq);
    a.sk = static_cast<int>(d.sk);
    if (!m.kv_len.empty()) {
        check_tensor(ex, m.kv_len, DType::i32, op, "mask.kv_len");
        a.kv_len = m.kv_len.i32();
    }
    if (!m.sinks.empty()) {
        check_tensor(ex, m.sinks, DType::f32, op, "mask.sinks");
        a.sinks = m.sinks.f32();
    }
    // Positions stay below the key rows Sk, so a window of Sk keys or more is no window (and the
    // kernels' position arithmetic stays inside an int).
    a.window = m.window < d.sk ? static_cast<int>(m.window) : 0;
    switch (m.kind) {
        case AttnMaskKind::causal:
            a.kind = attn::kCausal;
            if (m.kv_len.empty()) a.q_offset = static_cast<int>(m.q_offset);
            break;
        case AttnMaskKind::full:
            a.kind = attn::kFull;
            break;
        case AttnMaskKind::dflash_block: {
            a.kind = attn::kDflash;
            const int64_t n = d.sq / m.block_size;
            check_tensor(ex, m.anchors, DType::i32, op, "mask.anchors");
            a.ctx_len = static_cast<int>(m.ctx_len);
            a.block = static_cast<int>(m.block_size);
            a.causal_block = m.causal_block;
            a.anchors = n > 0 ? m.anchors.i32() : nullptr;
            if (!m.ctx_start.empty()) {
                check_tensor(ex, m.ctx_start, DType::i32, op, "mask.ctx_start");
                a.ctx_start = n > 0 ? m.ctx_start.i32() : nullptr;
            }
            break;
        }
    }
    return a;
}

OpWorkspace& scratch_of(const Exec& ex, const char* op) {
    DF_CHECK(ex.scratch != nullptr, "{}: the Exec has no op workspace", op);
    return *ex.scratch;
}

// dflash: the per-query-tile key ranges, computed on the device from the anchors.
void plan_dflash(const Exec& ex, attn::MaskArgs& m, const char* op) {
    if (m.kind != attn::kDflash || m.sq == 0) return;
    const int n = attn::num_query_tiles(m.sq);
    attn::QTileKeys* table = scratch_of(ex, op).take_n<attn::QTileKeys>(
        static_cast<size_t>(n), "attention dflash tile table");
    attn::dflash_plan(m, table, ex.stream);
    m.qtiles = table;
}

}  // namespace

void attention_fwd(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v,
                   const AttnMask& mask, const Tensor& out, const Tensor& lse) {
    const char* op = "attention_fwd";
    for (const auto& [t, name] :
         {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}, std::pair{&out, "out"}})
        check_heads_tensor(ex, *t, op, name);
    check_tensor(ex, lse, DType::f32, op, "lse");
    const AttentionDims d = check_attention_fwd_shapes(q, k, v, mask, out, lse);
    check_kernel_limits(d, q, k, op);
    attn::FwdArgs a;
    a.mask = mask_args(ex, mask, d, op);
    a.q = q.bf16();
    a.k = k.bf16();
    a.v = v.bf16();
    a.out = out.bf16();
    a.lse = lse.empty() ? nullptr : lse.f32();
    a.h = static_cast<int>(d.h);
    a.hkv = static_cast<int>(d.hkv);
    a.d = static_cast<int>(d.dh);
    a.pdl = ex.pdl;
    if (d.sq == 0 || d.h == 0) return;
    if (a.mask.kind != attn::kDflash && d.sq <= kDecodeMaxQueries) {
        const attn::DecodePlan p = attn::plan_decode(a.mask.sq, a.h / a.hkv, a.mask.sk);
        OpWorkspace& ws = scratch_of(ex, op);
        float* part_o =
            ws.take_n<float>(attn::decode_partial_floats(a, p), "attention decode partial outputs");
        float* part_ml =
            ws.take_n<float>(attn::decode_stats_floats(a, p), "attention decode partial max/sum");
        attn::decode(a, p, part_o, part_ml, ex.stream);
        return;
    }
    plan_dflash(ex, a.mask, op);
    attn::fwd(a, ex.stream);
}

void attention_bwd(const Exec& ex, const Tensor& dout, const Tensor& q, const Tensor& k,
                   const Tensor& v, const Tensor& out, const Tensor& lse, const AttnMask& mask,
                   const Tensor& dq, const Tensor& dk, const Tensor& dv) {
    const char* op = "attention_bwd";
    for (const auto& [t, name] :
         {std::pair{&dout, "dout"}, std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"},
          std::pair{&out, "out"}, std::pair{&dq, "dq"}, std::pair{&dk, "dk"}, std::pair{&dv, "dv"}})
        check_heads_tensor(ex, *t, op, name);
    check_tensor(ex, lse, DType::f32, op, "lse");
    const AttentionDims d = check_attention_bwd_shapes(dout, q, k, v, out, lse, mask, dq, dk, dv);
    check_kernel_limits(d, q, k, op);
    attn::BwdArgs a;
    a.mask = mask_args(ex, mask, d, op);
    a.dout = dout.bf16();
    a.q = q.bf16();
    a.k = k.bf16();
    a.v = v.bf16();
    a.out = out.bf16();
    a.lse = lse.empty() ? nullptr : lse.f32();
    a.dq = dq.bf16();
    a.dk = dk.bf16();
    a.dv = dv.bf16();
    a.h = static_cast<int>(d.h);
    a.hkv = static_cast<int>(d.hkv);
    a.d = static_cast<int>(d.dh);
    if (d.h == 0) return;
    OpWorkspace& ws = scratch_of(ex, op);
    if (d.sq > 0) {
        a.delta = ws.take_n<float>(static_cast<size_t>(d.h * d.sq), "attention backward delta");
    }
    plan_dflash(ex, a.mask, op);
    // Split the shared context key tiles when the workspace has room for the partials (the
    // choice depends on sizes only, so the bits do not change from run to run).
    a.kv_splits = attn::dkdv_splits_wanted(a.mask.kind, a.mask.sq, a.h / a.hkv);
    const size_t room = ws.capacity() - ws.mark();
    while (a.kv_splits > 1 && (attn::dkdv_partial_floats(a, a.kv_splits) * 4 + 256) > room) {
        --a.kv_splits;
    }
    if (a.kv_splits > 1) {
        a.dkdv_partial = ws.take_n<float>(attn::dkdv_partial_floats(a, a.kv_splits),
                                          "attention backward dK/dV split partials");
    }
    attn::bwd(a, ex.stream);
}

}  // namespace dflash::cuda

// CUDA attention at the Tensor level: checks shapes, dtypes, devices and the mask (as the CPU
// reference backend/cpu/attention.cpp defines them), takes the kernels' temporaries from
// ex.scratch and calls the raw launchers of kernels/attention.h. Built by the C++ compiler.
// Tested by tests/cuda/attention_cuda_test.cpp against the CPU backend.
//
// Paths: a causal or full mask with at most kDecodeMaxQueries queries (decoding, verifying)
// takes the split-KV decode kernel; everything else the FlashAttention-2 kernel. Values that
// live in device memory (kv_len, anchors) are never read here: anchors above ctx_len and kv_len
// outside [0, capacity] cannot be rejected, and are clamped on the device (attention_tiles.h).
#include <climits>
#include <cstdint>

#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/kernels/attention.h"
#include "backend/cuda/op_workspace.h"
#include "core/error.h"

namespace dflash::cuda {
namespace {

constexpr int64_t kDecodeMaxQueries = 16;
constexpr int64_t kMaxRows = INT_MAX / 2;  // row indices are int on the device

struct Dims {
    int64_t sq = 0, sk = 0, h = 0, hkv = 0, d = 0;
};

void check_bf16_3d(const Exec& ex, const Tensor& t, const char* op, const char* name) {
    check_device(ex, t, op, name);
    DF_CHECK(t.dtype() == DType::bf16 && t.rank() == 3,
             "{}: {} is {}, expected bf16 of rank 3 ([S, heads, Dh])", op, name, t.describe());
    DF_CHECK(reinterpret_cast<uintptr_t>(t.data()) % 16 == 0,
             "{}: {} ({}) is not 16-byte aligned, which the kernels' vector loads need", op, name,
             t.describe());
}

void check_like(const Exec& ex, const Tensor& t, const Tensor& like, const char* op,
                const char* name, const char* like_name) {
    check_bf16_3d(ex, t, op, name);
    DF_CHECK(t.shape() == like.shape(), "{}: {} is {}, expected the shape of {} {}", op, name,
             t.describe(), like_name, like.shape().to_string());
}

Dims check_qkv(const Exec& ex, const Tensor& q, const Tensor& k, const Tensor& v, const char* op) {
    check_bf16_3d(ex, q, op, "q");
    check_bf16_3d(ex, k, op, "k");
    check_like(ex, v, k, op, "v", "k");
    Dims d{q.dim(0), k.dim(0), q.dim(1), k.dim(1), q.dim(2)};
    DF_CHECK(k.dim(2) == d.d, "{}: k head dim {} != q head dim {} (q {}, k {})", op, k.dim(2), d.d,
             q.describe(), k.describe());
    DF_CHECK(attn::head_dim_supported(static_cast<int>(d.d)),
             "{}: head dim {} has no CUDA kernel; supported head dims are 64 and 128 (q {})", op,
             d.d, q.describe());
    DF_CHECK(d.hkv > 0 && d.h % d.hkv == 0,
             "{}: q has H={} heads and k has Hkv={}; expected H to be a positive multiple of Hkv "
             "(GQA)",
             op, d.h, d.hkv);
    DF_CHECK(d.sq <= kMaxRows && d.sk <= kMaxRows && d.h <= 65535,
             "{}: q {} / k {} exceed the kernels' index range (rows < 2^30, heads < 65536)", op,
             q.describe(), k.describe());
    return d;
}

attn::MaskArgs check_mask(const Exec& ex, const AttnMask& m, const Dims& d, const char* op) {
    attn::MaskArgs a;
    a.sq = static_cast<int>(d.sq);
    a.sk = static_cast<int>(d.sk);
    if (!m.kv_len.empty()) {
        check_device(ex, m.kv_len, op, "mask.kv_len");
        DF_CHECK(m.kind != AttnMaskKind::dflash_block && m.kv_len.dtype() == DType::i32 &&
                     m.kv_len.numel() == 1,
                 "{}: mask.kv_len is {}, expected i32 [1] with a causal or full mask", op,
                 m.kv_len.describe());
        a.kv_len = m.kv_len.i32();
    }
    switch (m.kind) {
        case AttnMaskKind::causal:
            a.kind = attn::kCausal;
            if (m.kv_len.empty()) {
                DF_CHECK(m.q_offset >= 0 && m.q_offset + d.sq <= d.sk,
                         "{}: causal mask with q_offset={} and Sq={} needs q_offset + Sq <= Sk={} "
                         "(the keys must include every query's own position)",
                         op, m.q_offset, d.sq, d.sk);
                a.q_offset = static_cast<int>(m.q_offset);
            }
            break;
        case AttnMaskKind::full:
            a.kind = attn::kFull;
            break;
        case AttnMaskKind::dflash_block: {
            a.kind = attn::kDflash;
            DF_CHECK(m.block_size > 0, "{}: dflash_block mask has block_size={}, expected > 0", op,
                     m.block_size);
            DF_CHECK(d.sq % m.block_size == 0,
                     "{}: dflash_block has Sq={} queries, expected a multiple of block_size={} "
                     "(Sq = N * block_size)",
                     op, d.sq, m.block_size);
            DF_CHECK(m.ctx_len >= 0 && d.sk == m.ctx_len + d.sq,
                     "{}: dflash_block has Sk={} keys but ctx_len={} and Sq={}; expected "
                     "Sk = ctx_len + Sq (keys are [context rows ; block rows])",
                     op, d.sk, m.ctx_len, d.sq);
            const int64_t n = d.sq / m.block_size;
            check_device(ex, m.anchors, op, "mask.anchors");
            DF_CHECK(m.anchors.dtype() == DType::i32 && m.anchors.numel() == n &&
                         (n == 0 || !m.anchors.empty()),
                     "{}: dflash_block mask with {} blocks has anchors {}, expected i32 [{}] on "
                     "cuda:{}",
                     op, n, m.anchors.describe(), n, ex.device);
            a.ctx_len = static_cast<int>(m.ctx_len);
            a.block = static_cast<int>(m.block_size);
            a.anchors = n > 0 ? m.anchors.i32() : nullptr;
            if (!m.ctx_start.empty()) {
                check_device(ex, m.ctx_start, op, "mask.ctx_start");
                DF_CHECK(m.ctx_start.dtype() == DType::i32 && m.ctx_start.numel() == n,
                         "{}: dflash_block mask with {} blocks has ctx_start {}, expected i32 [{}] "
                         "on cuda:{}",
                         op, n, m.ctx_start.describe(), n, ex.device);
                a.ctx_start = n > 0 ? m.ctx_start.i32() : nullptr;
            }
            break;
        }
    }
    return a;
}

void check_lse(const Exec& ex, const Tensor& lse, const Dims& d, const char* op) {
    check_device(ex, lse, op, "lse");
    DF_CHECK(lse.dtype() == DType::f32 && lse.shape() == Shape({d.h, d.sq}),
             "{}: lse is {}, expected f32[{}, {}] ([H, Sq])", op, lse.describe(), d.h, d.sq);
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
    const Dims d = check_qkv(ex, q, k, v, op);
    check_like(ex, out, q, op, "out", "q");
    if (!lse.empty()) check_lse(ex, lse, d, op);
    attn::FwdArgs a;
    a.mask = check_mask(ex, mask, d, op);
    a.q = q.bf16();
    a.k = k.bf16();
    a.v = v.bf16();
    a.out = out.bf16();
    a.lse = lse.empty() ? nullptr : lse.f32();
    a.h = static_cast<int>(d.h);
    a.hkv = static_cast<int>(d.hkv);
    a.d = static_cast<int>(d.d);
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
    const Dims d = check_qkv(ex, q, k, v, op);
    check_like(ex, dout, q, op, "dout", "q");
    check_like(ex, out, q, op, "out", "q");
    check_like(ex, dq, q, op, "dq", "q");
    check_like(ex, dk, k, op, "dk", "k");
    check_like(ex, dv, k, op, "dv", "k");
    DF_CHECK(!lse.empty() || d.h * d.sq == 0,
             "{}: lse is empty; the backward needs the lse [H, Sq] of the forward", op);
    if (!lse.empty()) check_lse(ex, lse, d, op);
    attn::BwdArgs a;
    a.mask = check_mask(ex, mask, d, op);
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
    a.d = static_cast<int>(d.d);
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

// Mixture of experts, the fp32 reference (semantics in backend/op_list.h, structs in
// backend/ops.h): moe_route picks each token's experts and their weights; moe_experts runs the
// picked experts' MLPs and sums their outputs. Tested by tests/ops/moe_test.cpp.
//
// Note [moe reference]: the experts run grouped. For a block of tokens, the (token, pick) pairs
// are gathered per expert in (token, pick) order, each expert multiplies its rows with the
// shared sgemm (its gate_up, the activation, its down), and every pair's expert output lands in
// its own row of a per-block buffer; each token then sums its k rows in pick order. The sgemm
// calls take the unpacked path whatever their row count (plan_rows = 1, Note [sgemm]): then a
// pair's output does not depend on how many other rows its expert got, so a token's bits are the
// same alone, in a verify block or in a prefill, and the same for any block size or thread count.
// MXFP4 experts are decoded per expert and token block into f32 (exact), then multiplied the same
// way: the same bits as the op on the decoded weights.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/sgemm.h"
#include "backend/mxfp4.h"
#include "backend/op_shapes.h"
#include "core/error.h"

namespace dflash::cpu {
namespace {

// Tokens whose expert outputs are held at once (a buffer of kTokenBlock * k * D floats).
constexpr int64_t kTokenBlock = 128;

float sigmoid(float v) {
    return 1.0f / (1.0f + std::exp(-v));
}

// a[i] from the gate and up pre-activations (biases already added).
void activate(const MoeExperts& w, const float* gate, const float* up, float* a, int64_t n) {
    if (w.activation == MoeActivation::swiglu) {
        for (int64_t i = 0; i < n; ++i) a[i] = gate[i] * sigmoid(gate[i]) * up[i];
        return;
    }
    for (int64_t i = 0; i < n; ++i) {
        const float g = std::min(gate[i], w.limit);
        const float u = std::clamp(up[i], -w.limit, w.limit);
        a[i] = (u + 1.0f) * g * sigmoid(w.alpha * g);
    }
}

// Expert e's [rows, cols] matrix: a view into the f32 tensor, or its MXFP4 rows decoded into buf
// (the same values the loader's decode gives, so the same products follow).
const float* expert_matrix(const Tensor& f32, const Tensor& blocks, const Tensor& scales, int64_t e,
                           int64_t rows, int64_t cols, std::vector<float>& buf) {
    if (blocks.empty()) return f32.f32() + e * rows * cols;
    const int64_t groups = cols / 32;
    buf.resize(static_cast<size_t>(rows * cols));
    decode_mxfp4({blocks.u8() + e * rows * groups * 16, static_cast<size_t>(rows * groups * 16)},
                 {scales.u8() + e * rows * groups, static_cast<size_t>(rows * groups)}, rows,
                 groups, buf.data());
    return buf.data();
}

// One expert's rows of a token block: y[n, D] = down · act(gate_up · x_rows + b_gu) + b_d for
// the n rows of xs [n, D]. h [n, 2I] and a [n, I] are the caller's scratch; gu [2I, D] and
// dn [D, I] the expert's matrices.
void run_expert(const MoeExperts& w, int64_t e, const MoeExpertsDims& d, const float* gu,
                const float* dn, const float* xs, int64_t n, float* h, float* a, float* y) {
    const int64_t D = d.D, I = d.I;
    sgemm(n, 2 * I, D, 1.0f, MatrixRef{xs, D, false}, MatrixRef{gu, D, true}, 0.0f, h, 2 * I, 1);
    for (int64_t r = 0; r < n; ++r) {
        float* hr = h + r * 2 * I;
        if (!w.gate_up_bias.empty()) {
            const float* b = w.gate_up_bias.f32() + e * 2 * I;
            for (int64_t c = 0; c < 2 * I; ++c) hr[c] += b[c];
        }
        activate(w, hr, hr + I, a + r * I, I);
    }
    sgemm(n, D, I, 1.0f, MatrixRef{a, I, false}, MatrixRef{dn, I, true}, 0.0f, y, D, 1);
    if (!w.down_bias.empty()) {
        const float* b = w.down_bias.f32() + e * D;
        for (int64_t r = 0; r < n; ++r)
            for (int64_t c = 0; c < D; ++c) y[r * D + c] += b[c];
    }
}

}  // namespace

void moe_route(const Exec& ex, const Tensor& logits, const MoeRouting& routing,
               const Tensor& experts, const Tensor& weights) {
    constexpr const char* op = "moe_route";
    check_cpu_f32(logits, op, "logits");
    check_cpu_f32(weights, op, "weights");
    DF_CHECK(experts.device().kind == DeviceKind::cpu, "{}: experts is {}, expected a CPU tensor",
             op, experts.describe());
    const MoeRouteDims d = check_moe_route_shapes(logits, routing, experts, weights);
    parallel_for(ex, d.R, d.R > 64, [&](int64_t r0, int64_t r1) {
        std::vector<int32_t> order(d.E);
        for (int64_t r = r0; r < r1; ++r) {
            const float* l = logits.f32() + r * d.E;
            int32_t* ids = experts.i32() + r * d.k;
            float* wts = weights.f32() + r * d.k;
            std::iota(order.begin(), order.end(), 0);
            // A strict total order (logit descending, then id ascending): the picks do not depend
            // on the sort's own handling of ties.
            std::partial_sort(
                order.begin(), order.begin() + d.k, order.end(),
                [&](int32_t p, int32_t q) { return l[p] > l[q] || (l[p] == l[q] && p < q); });
            for (int64_t j = 0; j < d.k; ++j) ids[j] = order[j];
            // Both kinds subtract the row's largest logit (the first pick) before exp.
            const float top = l[order[0]];
            if (routing.kind == MoeRouterKind::topk_softmax) {
                float sum = 0.0f;
                for (int64_t j = 0; j < d.k; ++j) sum += (wts[j] = std::exp(l[ids[j]] - top));
                for (int64_t j = 0; j < d.k; ++j) wts[j] /= sum;
                continue;
            }
            float sum = 0.0f;
            for (int64_t e = 0; e < d.E; ++e) sum += std::exp(l[e] - top);
            for (int64_t j = 0; j < d.k; ++j) wts[j] = std::exp(l[ids[j]] - top) / sum;
            if (!routing.normalize) continue;
            float picked = 0.0f;
            for (int64_t j = 0; j < d.k; ++j) picked += wts[j];
            for (int64_t j = 0; j < d.k; ++j) wts[j] /= picked;
        }
    });
}

void moe_experts(const Exec& ex, const Tensor& x, const Tensor& experts, const Tensor& weights,
                 const MoeExperts& w, const Tensor& out) {
    constexpr const char* op = "moe_experts";
    check_cpu_f32(x, op, "x");
    check_cpu_f32(weights, op, "weights");
    check_cpu_f32(out, op, "out");
    if (w.mxfp4()) {
        for (const Tensor* t :
             {&w.gate_up_blocks, &w.gate_up_scales, &w.down_blocks, &w.down_scales})
            DF_CHECK(t->device().kind == DeviceKind::cpu, "{}: MXFP4 tensor {} is not a CPU tensor",
                     op, t->describe());
    } else {
        check_cpu_f32(w.gate_up, op, "gate_up");
        check_cpu_f32(w.down, op, "down");
    }
    if (!w.gate_up_bias.empty()) check_cpu_f32(w.gate_up_bias, op, "gate_up_bias");
    if (!w.down_bias.empty()) check_cpu_f32(w.down_bias, op, "down_bias");
    DF_CHECK(experts.device().kind == DeviceKind::cpu, "{}: experts is {}, expected a CPU tensor",
             op, experts.describe());
    const MoeExpertsDims d = check_moe_experts_shapes(x, experts, weights, w, out);
    const int32_t* ids = experts.i32();
    for (int64_t p = 0; p < d.R * d.k; ++p)
        DF_CHECK(ids[p] >= 0 && ids[p] < d.E, "{}: experts[{}, {}] = {} is outside [0, E={})", op,
                 p / d.k, p % d.k, ids[p], d.E);
    const int64_t D = d.D, I = d.I, k = d.k;
    std::vector<float> ys(static_cast<size_t>(std::min(d.R, kTokenBlock) * k * D));
    for (int64_t t0 = 0; t0 < d.R; t0 += kTokenBlock) {
        const int64_t t1 = std::min(d.R, t0 + kTokenBlock);
        // The block's pairs p (rows of ys) by expert, in pair order within an expert.
        std::vector<std::vector<int64_t>> rows_of(static_cast<size_t>(d.E));
        for (int64_t p = t0 * k; p < t1 * k; ++p) rows_of[static_cast<size_t>(ids[p])].push_back(p);
        std::vector<int64_t> used;
        for (int64_t e = 0; e < d.E; ++e)
            if (!rows_of[static_cast<size_t>(e)].empty()) used.push_back(e);
        // One part per expert: the pool hands parts out as threads free up (experts differ in
        // rows); a pair's output does not depend on which thread computes it.
        auto part = [&](int64_t u) {
            const int64_t e = used[static_cast<size_t>(u)];
            const std::vector<int64_t>& rows = rows_of[static_cast<size_t>(e)];
            const auto n = static_cast<int64_t>(rows.size());
            std::vector<float> xs(static_cast<size_t>(n * D)), h(static_cast<size_t>(n * 2 * I)),
                a(static_cast<size_t>(n * I)), y(static_cast<size_t>(n * D));
            for (int64_t i = 0; i < n; ++i)
                std::copy_n(x.f32() + rows[static_cast<size_t>(i)] / k * D, D, xs.data() + i * D);
            std::vector<float> gu_buf, dn_buf;
            const float* gu =
                expert_matrix(w.gate_up, w.gate_up_blocks, w.gate_up_scales, e, 2 * I, D, gu_buf);
            const float* dn = expert_matrix(w.down, w.down_blocks, w.down_scales, e, D, I, dn_buf);
            run_expert(w, e, d, gu, dn, xs.data(), n, h.data(), a.data(), y.data());
            for (int64_t i = 0; i < n; ++i)
                std::copy_n(y.data() + i * D, D,
                            ys.data() + (rows[static_cast<size_t>(i)] - t0 * k) * D);
        };
        const auto parts = static_cast<int64_t>(used.size());
        if (ex.pool != nullptr && parts > 1 && ex.threads() > 1) {
            ex.pool->run(parts, part);
        } else {
            for (int64_t u = 0; u < parts; ++u) part(u);
        }
        parallel_for(ex, t1 - t0, (t1 - t0) * k * D > 16384, [&](int64_t i0, int64_t i1) {
            for (int64_t t = t0 + i0; t < t0 + i1; ++t) {
                float* o = out.f32() + t * D;
                std::fill_n(o, D, 0.0f);
                for (int64_t j = 0; j < k; ++j) {
                    const float wj = weights.f32()[t * k + j];
                    const float* y = ys.data() + ((t - t0) * k + j) * D;
                    for (int64_t c = 0; c < D; ++c) o[c] += wj * y[c];
                }
            }
        });
    }
}

}  // namespace dflash::cpu

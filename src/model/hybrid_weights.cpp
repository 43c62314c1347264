// Row orders of the hybrid families' fused projections. Tested by
// tests/model/hybrid_loading_test.cpp.
#include "model/hybrid_weights.h"

#include <cstring>

#include "core/error.h"

namespace dflash {

std::vector<int64_t> hybrid_row_source(const TargetConfig& c, const std::string& name) {
    std::vector<int64_t> src;
    if (!c.hybrid()) return src;
    if (c.attn_output_gate && name.ends_with(".self_attn.q_proj.weight")) {
        const int64_t h = c.num_attention_heads, dh = c.head_dim;
        src.resize(static_cast<size_t>(2 * h * dh));
        for (int64_t head = 0; head < h; ++head)
            for (int64_t j = 0; j < dh; ++j) {
                src[head * dh + j] = head * 2 * dh + j;                // query
                src[h * dh + head * dh + j] = head * 2 * dh + dh + j;  // gate
            }
        return src;
    }
    if (c.model_type != "qwen3_next") return src;
    const int64_t hk = c.linear_num_key_heads, hv = c.linear_num_value_heads;
    const int64_t dk = c.linear_key_head_dim, dv = c.linear_value_head_dim, r = hv / hk;
    if (name.ends_with(".linear_attn.in_proj_qkvz.weight")) {
        const int64_t group = 2 * dk + 2 * r * dv;
        src.resize(static_cast<size_t>(hk * group));
        const int64_t k0 = hk * dk, v0 = 2 * hk * dk, z0 = v0 + hv * dv;
        for (int64_t g = 0; g < hk; ++g) {
            const int64_t base = g * group;
            for (int64_t j = 0; j < dk; ++j) {
                src[g * dk + j] = base + j;
                src[k0 + g * dk + j] = base + dk + j;
            }
            for (int64_t j = 0; j < r * dv; ++j) {
                src[v0 + g * r * dv + j] = base + 2 * dk + j;
                src[z0 + g * r * dv + j] = base + 2 * dk + r * dv + j;
            }
        }
        return src;
    }
    if (name.ends_with(".linear_attn.in_proj_ba.weight")) {
        src.resize(static_cast<size_t>(2 * hv));
        for (int64_t g = 0; g < hk; ++g)
            for (int64_t j = 0; j < r; ++j) {
                src[g * r + j] = g * 2 * r + j;
                src[hv + g * r + j] = g * 2 * r + r + j;
            }
    }
    return src;
}

namespace {

HostTensor permute_rows(const HostTensor& in, const std::vector<int64_t>& src, bool gather) {
    const int64_t rows = in.shape()[0];
    DF_ASSERT(static_cast<int64_t>(src.size()) == rows, "{} row indices for {} rows", src.size(),
              rows);
    const int64_t cols = in.numel() / rows;
    HostTensor out(in.shape());
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t to = gather ? r : src[r], from = gather ? src[r] : r;
        std::memcpy(out.f32() + to * cols, in.f32() + from * cols, sizeof(float) * cols);
    }
    return out;
}

}  // namespace

HostTensor gather_rows(const HostTensor& in, const std::vector<int64_t>& src) {
    return permute_rows(in, src, true);
}

HostTensor scatter_rows(const HostTensor& in, const std::vector<int64_t>& src) {
    return permute_rows(in, src, false);
}

}  // namespace dflash

// Row orders of the hybrid families' fused projections (docs/formats.md "Hybrid linear-attention
// targets"). Checkpoints interleave what the forward wants contiguous: q_proj of a gated attention
// layer holds per head [query (Dh) | gate (Dh)]; Qwen3-Next's in_proj_qkvz holds per key head g
// [q_g (dk) | k_g (dk) | v_g (r dv) | z_g (r dv)] and in_proj_ba per g [b_g (r) | a_g (r)],
// r = Hv / Hk. The model keeps the same tensor under the same name with its rows regrouped (all
// queries then all gates; q | k | v | z; b | a), so each part is a contiguous row range of one
// parameter: the loader gathers the rows, save() scatters them back. Tested by
// tests/model/hybrid_loading_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/hf_config.h"

namespace dflash {

// For parameter `name` of a model with config c: model row r holds stored row src[r]. Empty when
// the two orders agree.
std::vector<int64_t> hybrid_row_source(const TargetConfig& c, const std::string& name);

// out[r] = in[src[r]] over the first dimension (load), and its inverse out[src[r]] = in[r] (save).
HostTensor gather_rows(const HostTensor& in, const std::vector<int64_t>& src);
HostTensor scatter_rows(const HostTensor& in, const std::vector<int64_t>& src);

}  // namespace dflash

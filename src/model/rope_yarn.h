// YaRN RoPE (rope_type "yarn", gpt-oss): the inverse frequencies blend interpolated (divided by
// the factor) and original ones with a ramp over the dimensions between the beta_fast and
// beta_slow correction points, and cos/sin are scaled by an attention factor. Computed here in
// the model layer (upload_inv_freq), in float32 in transformers' order of operations, so long
// positions rotate by the angles the model was trained with. Tested by
// tests/model/moe_forward_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/ops.h"

namespace dflash {

// f32 [head_dim / 2] inverse frequencies of a YaRN rope (rope.scaling.type == yarn).
std::vector<float> yarn_inv_freq(const RopeConfig& rope, int64_t head_dim);

// The factor YaRN multiplies cos and sin by: attention_factor when the config gives one, else
// 0.1 ln(factor) + 1 (1 when factor <= 1). 1 for every other rope.
double rope_attention_factor(const RopeScaling& s);

}  // namespace dflash

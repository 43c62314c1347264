// Mixture-of-experts weights between checkpoints and the model: every stored spelling of a
// target's experts (ExpertFormat, model/tensor_layout.h) converted at load into the one layout the
// forward reads ([E, 2I, D] gate rows then up rows, [E, D, I]), MXFP4 blocks decoded on the way,
// and the family's Hub layout written back on save (per-expert for qwen3_moe, transformers'
// bf16 layout for gpt_oss). Tested by tests/model/moe_loading_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/checkpoint_io.h"
#include "core/tensor.h"
#include "model/hf_config.h"
#include "model/params.h"
#include "model/tensor_layout.h"

namespace dflash {

// The value of a 4-bit e2m1 code: bits 0-2 pick 0, 0.5, 1, 1.5, 2, 3, 4 or 6, bit 3 the sign.
float e2m1_value(uint8_t code);

// MXFP4 rows into f32: `rows` rows of `groups` groups of 32 values, each group 16 bytes of blocks
// (byte j: element 2j in the low nibble, 2j+1 in the high one) times 2^(scale - 127) from one
// scale byte. blocks [rows, groups, 16], scales [rows, groups], out [rows, groups * 32].
void decode_mxfp4(std::span<const uint8_t> blocks, std::span<const uint8_t> scales, int64_t rows,
                  int64_t groups, float* out);

// Every parameter of `params` (the model's layout, target_tensor_specs(c)) read from a checkpoint
// whose experts are stored in format f. check_target_files has checked every name, shape and dtype
// against f before the model was allocated.
// `names` maps the model's names to the checkpoint's (a hybrid wrapper's prefix); the hybrid
// families' fused projections are regrouped on the way (model/hybrid_weights.h).
void load_target_params(ParamSet& params, const TargetConfig& c, const CheckpointReader& r,
                        ExpertFormat f, const CheckpointNames& names = {});

// The family's Hub format: per-expert for qwen3_moe and qwen3_next, fused for qwen3_5_moe,
// transformers' bf16 layout for gpt_oss (what save() writes; transformers loads them all), none
// for dense targets.
ExpertFormat hub_expert_format(const TargetConfig& c);

// The parameters as a checkpoint in format f = hub_expert_format(c) stores them: (name, host f32
// tensor) in stored_target_specs(c, f) order; the hybrid families' fused projections in their
// stored row order, under the text model's own names (model.*, never a wrapper's prefix).
std::vector<std::pair<std::string, HostTensor>> stored_target_tensors(const ParamSet& params,
                                                                      const TargetConfig& c);

}  // namespace dflash

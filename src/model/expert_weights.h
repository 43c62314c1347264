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

#include "backend/mxfp4.h"
#include "core/checkpoint_io.h"
#include "core/tensor.h"
#include "model/hf_config.h"
#include "model/params.h"
#include "model/tensor_layout.h"

namespace dflash {

// Every parameter of `params` (the model's layout, target_tensor_specs(c)) read from a checkpoint
// whose experts are stored in format f. check_target_files has checked every name, shape and dtype
// against f before the model was allocated.
void load_target_params(ParamSet& params, const TargetConfig& c, const CheckpointReader& r,
                        ExpertFormat f);

// The family's Hub format: per-expert for qwen3_moe, transformers' bf16 layout for gpt_oss (what
// save() writes; transformers loads both), none for dense targets.
ExpertFormat hub_expert_format(const TargetConfig& c);

// The parameters as a checkpoint in format f = hub_expert_format(c) stores them: (name, host f32
// tensor) in stored_target_specs(c, f) order.
std::vector<std::pair<std::string, HostTensor>> stored_target_tensors(const ParamSet& params,
                                                                      const TargetConfig& c);

}  // namespace dflash

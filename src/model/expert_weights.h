// Mixture-of-experts weights between checkpoints and the model: every stored spelling of a
// target's experts (ExpertFormat, model/tensor_layout.h) converted at load into the one layout the
// forward reads ([E, 2I, D] gate rows then up rows, [E, D, I]), MXFP4 blocks decoded on the way,
// and the family's Hub layout written back on save (per-expert for qwen3_moe, transformers'
// bf16 layout for gpt_oss). MXFP4 experts may instead stay packed (PackedExperts: the blocks and
// scales in device memory, decoded inside moe_experts; what the GPU does, so gpt-oss-120b's
// experts take 63 GB instead of 234 GB), and such a model saves them back byte for byte.
// Tested by tests/model/moe_loading_test.cpp and tests/model/moe_packed_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/device_tensor.h"
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
// `names` maps the model's names to the checkpoint's (a hybrid wrapper's prefix); the hybrid
// families' fused projections are regrouped on the way (model/hybrid_weights.h).
void load_target_params(ParamSet& params, const TargetConfig& c, const CheckpointReader& r,
                        ExpertFormat f, const CheckpointNames& names = {});

// How a loaded target holds MXFP4 experts (TargetModel::load).
enum class Mxfp4Storage {
    backend_default,  // packed on CUDA, decoded on the CPU (whose fp32 reference reads them fast)
    decoded,          // decoded at load into the compute dtype: the gate_up_proj / down_proj params
    packed,           // the blocks and scales as stored, decoded inside moe_experts (PackedExperts)
};
// Whether a checkpoint in format f loaded onto be with storage s keeps its experts packed.
bool keeps_experts_packed(Mxfp4Storage s, ExpertFormat f, const Backend& be);

// The model's parameters: target_tensor_specs(c), less every MoE layer's gate_up_proj and
// down_proj when the experts stay packed (PackedExperts holds them).
std::vector<TensorSpec> target_param_specs(const TargetConfig& c, bool packed_experts);

// The MXFP4 experts of every MoE layer kept as stored, in one device buffer: per layer the four
// u8 tensors of MoeExperts (backend/ops.h), gate_up's rows put in the model's order (gate rows,
// then up rows; the checkpoint interleaves them) so the op reads them like the decoded layout.
class PackedExperts {
  public:
    struct Layer {
        Tensor gate_up_blocks, gate_up_scales, down_blocks, down_scales;  // empty: dense layer
    };
    PackedExperts() = default;
    // Reads them from a checkpoint in ExpertFormat::mxfp4 (names and shapes already checked by
    // check_target_files), one expert at a time through the host.
    static PackedExperts load(Backend& be, const TargetConfig& c, const CheckpointReader& r);

    bool empty() const { return layers_.empty(); }
    const Layer& layer(int64_t l) const { return layers_[static_cast<size_t>(l)]; }
    int64_t bytes() const;  // the blocks and scales of every layer
    // The tensors as the checkpoint stored them (names, u8 host tensors, rows interleaved again):
    // the bytes load() read.
    std::vector<std::pair<std::string, HostTensor>> stored_tensors(Backend& be,
                                                                   const TargetConfig& c) const;

  private:
    DeviceTensor storage_;  // u8
    std::vector<Layer> layers_;
};

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

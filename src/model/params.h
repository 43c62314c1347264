// ParamSet: a model's named parameters (HF tensor names) with optional gradients, created from a
// tensor layout, initialised randomly or loaded from an HF directory, and saved back.
// Tested by tests/model/target_test.cpp and tests/model/drafter_test.cpp.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "model/tensor_layout.h"

namespace dflash {

struct Param {
    std::string name;
    HostTensor value;  // f32, the layout's shape
    HostTensor grad;   // same shape when gradients are enabled, else empty
};

class ParamSet {
  public:
    ParamSet() = default;
    explicit ParamSet(const std::vector<TensorSpec>& specs);  // zero-filled values
    ParamSet(ParamSet&&) noexcept = default;
    ParamSet& operator=(ParamSet&&) noexcept = default;

    // HF-style initialisation: norm weights (names ending in "norm.weight") 1, biases 0, every
    // other tensor N(0, std^2).
    void init_random(Rng& rng, float std = 0.02f);
    // Reads every parameter from an HF directory (model.safetensors or sharded), checking shapes.
    void load(const std::filesystem::path& dir);
    // Writes model.safetensors (or shards) into dir; `store_as` f32 or bf16.
    void save(const std::filesystem::path& dir, DType store_as) const;

    void enable_grads();
    void zero_grads();
    bool has_grads() const { return !params_.empty() && !params_.front().grad.empty(); }

    bool has(const std::string& name) const { return index_.count(name) > 0; }
    Tensor value(const std::string& name) const;  // error naming the tensor if absent
    Tensor grad(const std::string& name) const;   // empty view if gradients are off
    std::vector<Param>& params() { return params_; }
    const std::vector<Param>& params() const { return params_; }
    int64_t numel() const;

  private:
    std::vector<Param> params_;
    std::map<std::string, size_t> index_;
};

}  // namespace dflash

// ParamSet: a model's named parameters (HF tensor names) on one backend's device, created from a
// tensor layout, initialised randomly or loaded from an HF directory, and saved back.
// Storage is flat, one buffer per kind, each parameter a view at its offset:
//   values  [numel]  the compute dtype (f32 on the CPU, bf16 on CUDA): what forwards read;
//   master  [numel]  f32 master weights, only when training on a bf16 backend (on an f32 backend
//                    the values are the masters);
//   grads   [numel]  f32 gradients, only when training.
// Flat buffers make the gradient all-reduce, the norm and AdamW one call each over the whole model.
// Tested by tests/train/optimizer_test.cpp, tests/model/target_test.cpp and drafter_test.cpp.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "model/tensor_layout.h"

namespace dflash {

struct Param {
    std::string name;
    Shape shape;
    int64_t offset = 0;  // elements into the flat buffers
    Tensor value;        // compute dtype
    Tensor master;       // f32 master weights (training; == value on an f32 backend), or empty
    Tensor grad;         // f32 (training), or empty
};

class ParamSet {
  public:
    ParamSet() = default;
    ParamSet(Backend& be, const std::vector<TensorSpec>& specs);  // zero-filled values
    ParamSet(ParamSet&&) noexcept = default;
    ParamSet& operator=(ParamSet&&) noexcept = default;

    // HF-style initialisation: norm weights (names ending in "norm.weight") 1, biases 0, every
    // other tensor N(0, std^2), drawn on this set's device by fill_normal_hash: element i of the
    // tensor named n gets a pure function of (seed, n, i) (init_seed), so the weights are the same
    // on every backend and thread count, and do not depend on the other tensors of the layout.
    void init_random(uint64_t seed, float std = 0.02f);
    // The fill_normal_hash seed of tensor `name` in a set initialised with `seed`.
    static uint64_t init_seed(uint64_t seed, const std::string& name);
    // Tensor `name` alone N(0, std^2), drawn as init_random draws it.
    void init_normal(const std::string& name, uint64_t seed, float std);
    // Reads every parameter from an HF directory (model.safetensors or sharded), checking shapes.
    void load(const std::filesystem::path& dir);
    // Writes model.safetensors (or shards) into dir; `store_as` f32 or bf16. Training sets save
    // their f32 masters.
    void save(const std::filesystem::path& dir, DType store_as) const;
    // The weights of `src` (same layout, any device), masters included when both train.
    void copy_from(const ParamSet& src);

    // Allocates f32 gradients (and masters on a bf16 backend); gradients on.
    void enable_training();
    void zero_grads();
    // Gradients are computed when training and not switched off (evaluation forwards).
    bool has_grads() const { return grads_on_ && !grads_.empty(); }
    void set_grads_on(bool on) { grads_on_ = on; }
    bool training() const { return !grads_.empty(); }

    bool has(const std::string& name) const { return index_.count(name) > 0; }
    Tensor value(const std::string& name) const;  // error naming the tensor if absent
    Tensor grad(const std::string& name) const;   // empty view when gradients are off
    const Param& param(const std::string& name) const;
    const std::vector<Param>& params() const { return params_; }
    int64_t numel() const { return numel_; }
    Backend& backend() const { return *be_; }

    Tensor flat_values() const { return values_.view(); }
    // The f32 weights AdamW updates: the masters, or the values on an f32 backend.
    Tensor flat_master() const { return master_.empty() ? values_.view() : master_.view(); }
    Tensor flat_grads() const { return grads_.view(); }
    // After flat_master() changed outside AdamW (a resume): refreshes the compute copy.
    void sync_values_from_master();

    // Note [Final gradients]: a backward pass tells, as it goes, that the gradients at flat
    // offsets >= `offset` will not change any more in this pass (models lay out their
    // parameters so that the backward finishes them from the top of the flat buffer down:
    // the loss's, the last layer's, ..., offset 0's last), so the trainer can start summing
    // them while the rest of the backward runs. A no-op without a listener; the trainer sets
    // one for the last micro-batch of a step (train/trainer.cpp).
    void grads_final_from(int64_t offset) const {
        if (final_listener_) final_listener_(offset);
    }
    // The same from the first parameter whose name starts with `prefix` (a layer's), looked up
    // only when someone listens: the backward calls it per layer on every step.
    void grads_final_from(std::string_view prefix) const {
        if (final_listener_) final_listener_(first_offset(prefix));
    }
    void set_grads_final_listener(std::function<void(int64_t)> f) {
        final_listener_ = std::move(f);
    }
    // The smallest flat offset of the parameters whose names start with `prefix`.
    int64_t first_offset(std::string_view prefix) const;

    // One parameter's f32 weights (master when training) on the host; writes them back. Setup
    // and tests only.
    HostTensor read_f32(const std::string& name) const;
    void write_f32(const std::string& name, const Tensor& host_f32);
    // Rows [row0, row0 + host_f32.dim(0)) of the parameter's first dimension (one expert of a
    // stacked expert tensor), so a large parameter is loaded without a whole host copy.
    void write_f32_rows(const std::string& name, int64_t row0, const Tensor& host_f32);
    // Uploads a parameter's values from host bf16 bits as they are (a checkpoint's BF16 tensor
    // onto a bf16 backend: no f32 round trip, which for a 30B-parameter target on one host
    // thread took minutes). Returns false, writing nothing, when the values are not bf16 or the
    // set keeps f32 masters (those come from write_f32).
    bool write_bf16_bits(const std::string& name, const void* host_bits, int64_t numel);
    // The same for rows [row0, row0 + rows) of the first dimension (one expert of a stack).
    bool write_bf16_bits_rows(const std::string& name, int64_t row0, int64_t rows,
                              const void* host_bits);

  private:
    Tensor weights_of(const Param& p) const;  // master when present, else value

    Backend* be_ = nullptr;
    std::vector<Param> params_;
    std::map<std::string, size_t> index_;
    int64_t numel_ = 0;
    DeviceTensor values_, master_, grads_;
    bool grads_on_ = true;
    std::function<void(int64_t)> final_listener_;
};

}  // namespace dflash

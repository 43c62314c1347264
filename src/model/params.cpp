// Named parameter storage. Tested by tests/model/target_test.cpp and tests/model/drafter_test.cpp.
#include "model/params.h"

#include "core/checkpoint_io.h"

namespace dflash {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
}  // namespace

ParamSet::ParamSet(const std::vector<TensorSpec>& specs) {
    params_.reserve(specs.size());
    for (const auto& spec : specs) {
        DF_ASSERT(!index_.count(spec.name), "duplicate parameter {}", spec.name);
        index_[spec.name] = params_.size();
        params_.push_back(Param{spec.name, HostTensor(Shape(spec.shape)), {}});
    }
}

void ParamSet::init_random(Rng& rng, float std) {
    for (auto& p : params_) {
        float* v = p.value.f32();
        const int64_t n = p.value.numel();
        if (ends_with(p.name, "norm.weight")) {
            for (int64_t i = 0; i < n; ++i) v[i] = 1.0f;
        } else if (ends_with(p.name, ".bias")) {
            for (int64_t i = 0; i < n; ++i) v[i] = 0.0f;
        } else {
            for (int64_t i = 0; i < n; ++i) v[i] = rng.normal() * std;
        }
    }
}

void ParamSet::load(const std::filesystem::path& dir) {
    CheckpointReader reader = CheckpointReader::open(dir);
    for (auto& p : params_) {
        DF_CHECK(reader.has(p.name), "{}: tensor '{}' is missing (expected shape {})", dir.string(),
                 p.name, p.value.shape().to_string());
        HostTensor t = reader.read_f32(p.name);
        DF_CHECK(t.shape() == p.value.shape(),
                 "{}: tensor '{}' has shape {} but the config implies {}", dir.string(), p.name,
                 t.shape().to_string(), p.value.shape().to_string());
        copy_tensor(p.value.view(), t.view());
    }
}

void ParamSet::save(const std::filesystem::path& dir, DType store_as) const {
    std::vector<std::pair<std::string, Tensor>> tensors;
    tensors.reserve(params_.size());
    for (const auto& p : params_) tensors.emplace_back(p.name, p.value.view());
    write_checkpoint(dir, tensors, store_as, size_t{4} << 30);
}

void ParamSet::enable_grads() {
    for (auto& p : params_)
        if (p.grad.empty()) p.grad = HostTensor(p.value.shape());
}

void ParamSet::zero_grads() {
    for (auto& p : params_)
        if (!p.grad.empty()) fill_f32(p.grad.view(), 0.0f);
}

Tensor ParamSet::value(const std::string& name) const {
    auto it = index_.find(name);
    DF_CHECK(it != index_.end(), "parameter '{}' does not exist in this model", name);
    return params_[it->second].value.view();
}

Tensor ParamSet::grad(const std::string& name) const {
    auto it = index_.find(name);
    DF_CHECK(it != index_.end(), "parameter '{}' does not exist in this model", name);
    return params_[it->second].grad.view();
}

int64_t ParamSet::numel() const {
    int64_t n = 0;
    for (const auto& p : params_) n += p.value.numel();
    return n;
}

}  // namespace dflash

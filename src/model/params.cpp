// Named parameter storage in flat device buffers. Tested by tests/train/optimizer_test.cpp,
// tests/model/target_test.cpp and tests/model/drafter_test.cpp.
#include "model/params.h"

#include <algorithm>

#include "core/checkpoint_io.h"
#include "core/hash.h"

namespace dflash {

namespace {
bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() &&
           s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

Tensor slice(const Tensor& flat, int64_t offset, const Shape& shape) {
    if (flat.empty()) return Tensor();
    return flat.reshape({flat.numel()}).rows(offset, offset + shape.numel()).reshape(shape);
}
}  // namespace

ParamSet::ParamSet(Backend& be, const std::vector<TensorSpec>& specs) : be_(&be) {
    params_.reserve(specs.size());
    for (const auto& spec : specs) {
        DF_ASSERT(!index_.count(spec.name), "duplicate parameter {}", spec.name);
        index_[spec.name] = params_.size();
        Param p;
        p.name = spec.name;
        p.shape = Shape(spec.shape);
        p.offset = numel_;
        numel_ += p.shape.numel();
        params_.push_back(std::move(p));
    }
    values_ = DeviceTensor(be, {numel_}, be.compute_dtype());
    for (Param& p : params_) p.value = slice(values_, p.offset, p.shape);
}

uint64_t ParamSet::init_seed(uint64_t seed, const std::string& name) {
    return fnv1a64(name, fnv1a64_u64(seed, kFnv1a64Offset));
}

void ParamSet::init_random(uint64_t seed, float std) {
    for (const Param& p : params_) {
        const bool ones = ends_with(p.name, "norm.weight"), zeros = ends_with(p.name, ".bias");
        if (!ones && !zeros) {
            init_normal(p.name, seed, std);
            continue;
        }
        be_->fill(p.value, ones ? 1.0f : 0.0f);
        if (!p.master.empty()) be_->fill(p.master, ones ? 1.0f : 0.0f);
    }
}

void ParamSet::init_normal(const std::string& name, uint64_t seed, float std) {
    const Param& p = param(name);
    // Into the f32 masters when there are any, rounded from them into the values (as write_f32
    // does).
    be_->fill_normal_hash(weights_of(p), init_seed(seed, p.name), std);
    if (!p.master.empty()) be_->copy(p.value, p.master);
}

void ParamSet::load(const std::filesystem::path& dir) {
    CheckpointReader reader = CheckpointReader::open(dir);
    for (const Param& p : params_) {
        DF_CHECK(reader.has(p.name), "{}: tensor '{}' is missing (expected shape {})", dir.string(),
                 p.name, p.shape.to_string());
        HostTensor t = reader.read_f32(p.name);
        DF_CHECK(t.shape() == p.shape, "{}: tensor '{}' has shape {} but the config implies {}",
                 dir.string(), p.name, t.shape().to_string(), p.shape.to_string());
        write_f32(p.name, t.view());
    }
}

void ParamSet::save(const std::filesystem::path& dir, DType store_as) const {
    std::vector<HostTensor> host;
    host.reserve(params_.size());
    std::vector<std::pair<std::string, Tensor>> tensors;
    tensors.reserve(params_.size());
    for (const Param& p : params_) {
        host.push_back(read_f32(p.name));
        tensors.emplace_back(p.name, host.back().view());
    }
    write_checkpoint(dir, tensors, store_as, size_t{4} << 30);
}

void ParamSet::copy_from(const ParamSet& src) {
    DF_ASSERT(src.numel_ == numel_ && src.params_.size() == params_.size(),
              "copy_from: layouts differ ({} vs {} elements)", src.numel_, numel_);
    const Tensor from = src.training() ? src.flat_master() : src.flat_values();
    if (src.be_->device() == be_->device()) {
        be_->copy(flat_master(), from);
    } else if (be_->device().kind == DeviceKind::cpu && from.dtype() == DType::f32) {
        // Into host memory: straight into this set's f32 values, with no temporary copy.
        src.be_->download(flat_master(), from);
    } else {
        HostTensor h = to_host_f32(*src.be_, from);
        from_host_f32(*be_, flat_master(), h.view());
    }
    sync_values_from_master();
}

void ParamSet::enable_training() {
    if (training()) return;
    grads_ = DeviceTensor(*be_, {numel_}, DType::f32);
    if (be_->compute_dtype() != DType::f32) {
        master_ = DeviceTensor(*be_, {numel_}, DType::f32);
        be_->copy(master_.view(), values_.view());
    }
    for (Param& p : params_) {
        p.grad = slice(grads_, p.offset, p.shape);
        p.master = slice(flat_master(), p.offset, p.shape);
    }
    grads_on_ = true;
}

void ParamSet::zero_grads() {
    if (!grads_.empty()) be_->fill(grads_.view(), 0.0f);
}

int64_t ParamSet::first_offset(std::string_view prefix) const {
    int64_t first = numel_;
    for (const Param& p : params_)
        if (std::string_view(p.name).starts_with(prefix)) first = std::min(first, p.offset);
    DF_CHECK(first < numel_ || numel_ == 0, "no parameter name starts with '{}'", prefix);
    return first;
}

void ParamSet::sync_values_from_master() {
    if (!master_.empty()) be_->copy(values_.view(), master_.view());
}

const Param& ParamSet::param(const std::string& name) const {
    auto it = index_.find(name);
    DF_CHECK(it != index_.end(), "parameter '{}' does not exist in this model", name);
    return params_[it->second];
}

Tensor ParamSet::value(const std::string& name) const {
    return param(name).value;
}

Tensor ParamSet::grad(const std::string& name) const {
    const Param& p = param(name);
    return has_grads() ? p.grad : Tensor();
}

Tensor ParamSet::weights_of(const Param& p) const {
    return p.master.empty() ? p.value : p.master;
}

HostTensor ParamSet::read_f32(const std::string& name) const {
    return to_host_f32(*be_, weights_of(param(name)));
}

void ParamSet::write_f32(const std::string& name, const Tensor& host_f32) {
    const Param& p = param(name);
    DF_CHECK(host_f32.numel() == p.shape.numel(), "parameter '{}' is {} but {} values were given",
             name, p.shape.to_string(), host_f32.numel());
    from_host_f32(*be_, p.value, host_f32);
    if (!master_.empty()) from_host_f32(*be_, p.master, host_f32);
}

void ParamSet::write_f32_rows(const std::string& name, int64_t row0, const Tensor& host_f32) {
    const Param& p = param(name);
    const int64_t n = host_f32.dim(0);
    DF_CHECK(row0 >= 0 && row0 + n <= p.shape[0] &&
                 host_f32.numel() == n * (p.shape.numel() / p.shape[0]),
             "parameter '{}' is {}: rows [{}, {}) of {} values do not fit", name,
             p.shape.to_string(), row0, row0 + n, host_f32.numel());
    from_host_f32(*be_, p.value.rows(row0, row0 + n), host_f32);
    if (!master_.empty()) from_host_f32(*be_, p.master.rows(row0, row0 + n), host_f32);
}

bool ParamSet::write_bf16_bits(const std::string& name, const void* host_bits, int64_t numel) {
    const Param& p = param(name);
    DF_CHECK(numel == p.shape.numel(), "parameter '{}' is {} but {} values were given", name,
             p.shape.to_string(), numel);
    return p.shape.rank() == 0 ? false : write_bf16_bits_rows(name, 0, p.shape[0], host_bits);
}

bool ParamSet::write_bf16_bits_rows(const std::string& name, int64_t row0, int64_t rows,
                                    const void* host_bits) {
    const Param& p = param(name);
    if (p.value.dtype() != DType::bf16 || !master_.empty()) return false;
    DF_CHECK(p.shape.rank() > 0 && row0 >= 0 && rows >= 0 && row0 + rows <= p.shape[0],
             "parameter '{}' is {}: rows [{}, {}) do not fit", name, p.shape.to_string(), row0,
             row0 + rows);
    const Tensor dst = p.value.rows(row0, row0 + rows);
    if (dst.numel() == 0) return true;
    be_->upload(dst, Tensor(const_cast<void*>(host_bits), DType::bf16, dst.shape()));
    be_->synchronize();  // the host bits may go away once this returns
    return true;
}

}  // namespace dflash

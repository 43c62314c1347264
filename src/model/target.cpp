// Target model forward, training step and KV-cached session. Tested by tests/model/target_test.cpp.
#include "model/target.h"

#include <cmath>
#include <cstring>

#include "model/tensor_layout.h"

namespace dflash {

namespace {

std::string layer_prefix(int64_t i) {
    return "model.layers." + std::to_string(i) + ".";
}

// Copies hidden [S, D] into column block `slot` of features [S, K*D].
void scatter_feature(const Tensor& features, int64_t slot, const Tensor& hidden) {
    const int64_t S = hidden.dim(0), D = hidden.dim(1), KD = features.dim(1);
    for (int64_t s = 0; s < S; ++s)
        std::memcpy(features.f32() + s * KD + slot * D, hidden.f32() + s * D, D * sizeof(float));
}

void check_capture(const TargetConfig& cfg, std::span<const int64_t> capture) {
    for (size_t i = 0; i < capture.size(); ++i)
        DF_CHECK(capture[i] >= 0 && capture[i] < cfg.num_hidden_layers,
                 "target_layer_ids[{}]={} but the target has {} layers (ids 0..{})", i, capture[i],
                 cfg.num_hidden_layers, cfg.num_hidden_layers - 1);
}

void fill_positions(const Tensor& pos, int64_t start) {
    for (int64_t i = 0; i < pos.numel(); ++i) pos.i32()[i] = static_cast<int32_t>(start + i);
}

}  // namespace

TargetModel::TargetModel(TargetConfig cfg)
    : cfg_(std::move(cfg)),
      dims_(layer_dims(cfg_)),
      inv_freq_(rope_inv_freq(cfg_.rope, cfg_.head_dim)),
      params_(target_tensor_specs(cfg_)) {
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l)
        layers_.push_back(layer_weights(params_, layer_prefix(l), dims_));
}

TargetModel TargetModel::load(const std::filesystem::path& dir) {
    TargetModel m(TargetConfig::load(dir));
    m.params_.load(dir);
    return m;
}

TargetModel TargetModel::random(TargetConfig cfg, uint64_t seed, float std) {
    TargetModel m(std::move(cfg));
    Rng rng(seed);
    m.params_.init_random(rng, std);
    return m;
}

void TargetModel::save(const std::filesystem::path& dir, DType store_as) const {
    std::filesystem::create_directories(dir);
    params_.save(dir, store_as);
    cfg_.save(dir);
}

Tensor TargetModel::embed() const {
    return params_.value("model.embed_tokens.weight");
}

Tensor TargetModel::lm_head() const {
    return cfg_.tie_word_embeddings ? embed() : params_.value("lm_head.weight");
}

void TargetModel::forward(Backend& be, std::span<const int32_t> tokens,
                          std::span<const int64_t> capture, Scratch& sc, const Tensor& features,
                          const Tensor& final_hidden) const {
    check_capture(cfg_, capture);
    const int64_t S = static_cast<int64_t>(tokens.size()), D = dims_.D;
    Tensor ids = sc.get("fwd.ids", {S}, DType::i32);
    std::memcpy(ids.data(), tokens.data(), S * sizeof(int32_t));
    Tensor pos = sc.get("fwd.pos", {S}, DType::i32);
    fill_positions(pos, 0);
    Tensor x = sc.get("fwd.x0", {S, D});
    Tensor y = sc.get("fwd.x1", {S, D});
    be.embedding_fwd(embed(), ids, x);
    const LayerContext lc{be, dims_, inv_freq_};
    LayerActs acts;
    for (int64_t l = 0; l < cfg_.num_hidden_layers; ++l) {
        layer_forward_train(lc, layer(l), x, Tensor(), pos, pos, AttnMask::causal(0), sc, "fwd.L",
                            acts, y);
        std::swap(x, y);
        for (size_t c = 0; c < capture.size(); ++c)
            if (capture[c] == l && !features.empty()) scatter_feature(features, c, x);
    }
    if (!final_hidden.empty())
        be.rmsnorm_fwd(x, params_.value("model.norm.weight"), dims_.eps, final_hidden, Tensor());
}

TargetModel::LossStats TargetModel::train_step(Backend& be, std::span<const int32_t> tokens,
                                               std::span<const uint8_t> loss_mask, float grad_scale,
                                               int64_t chunk, Scratch& sc) {
    const int64_t S = static_cast<int64_t>(tokens.size()), D = dims_.D, L = cfg_.num_hidden_layers;
    DF_CHECK(S >= 2, "a training sequence needs at least 2 tokens, got {}", S);
    DF_ASSERT(loss_mask.size() == tokens.size());
    const bool grads = params_.has_grads();
    Tensor ids = sc.get("ids", {S}, DType::i32);
    std::memcpy(ids.data(), tokens.data(), S * sizeof(int32_t));
    Tensor pos = sc.get("pos", {S}, DType::i32);
    fill_positions(pos, 0);
    // xs[l] is the input of layer l; xs[L] the last layer's output.
    std::vector<Tensor> xs;
    for (int64_t l = 0; l <= L; ++l) xs.push_back(sc.get("x" + std::to_string(l), {S, D}));
    be.embedding_fwd(embed(), ids, xs[0]);
    const LayerContext lc{be, dims_, inv_freq_};
    std::vector<LayerActs> acts(L);
    for (int64_t l = 0; l < L; ++l)
        layer_forward_train(lc, layer(l), xs[l], Tensor(), pos, pos, AttnMask::causal(0), sc,
                            "L" + std::to_string(l), acts[l], xs[l + 1]);
    Tensor rstd = sc.get("final.rstd", {S});
    Tensor hf = sc.get("final.h", {S, D});
    const Tensor norm_w = params_.value("model.norm.weight");
    be.rmsnorm_fwd(xs[L], norm_w, dims_.eps, hf, rstd);

    // Row t predicts token t+1; the last row has no label.
    Tensor labels = sc.get("labels", {S}, DType::i32);
    Tensor weights = sc.get("weights", {S});
    LossStats st;
    for (int64_t t = 0; t < S; ++t) {
        const bool valid = t + 1 < S && loss_mask[t + 1];
        labels.i32()[t] = valid ? tokens[t + 1] : -1;
        weights.f32()[t] = valid ? 1.0f : 0.0f;
    }
    LmHeadCeOut out;
    out.loss_rows = sc.get("loss_rows", {S});
    out.argmax = sc.get("argmax", {S}, DType::i32);
    Tensor dhf;
    if (grads) {
        dhf = sc.get("final.dh", {S, D});
        out.dh = dhf;
        out.dw = cfg_.tie_word_embeddings ? params_.grad("model.embed_tokens.weight")
                                          : params_.grad("lm_head.weight");
    }
    be.lm_head_ce(hf, lm_head(), labels, weights, grad_scale, chunk, out);
    for (int64_t t = 0; t < S; ++t) {
        if (weights.f32()[t] == 0.0f) continue;
        st.loss_sum += out.loss_rows.f32()[t];
        st.weight_sum += 1.0;
        st.rows += 1;
        st.correct += out.argmax.i32()[t] == labels.i32()[t];
    }
    if (!grads) return st;

    Tensor dx = sc.get("dx.a", {S, D});
    Tensor dprev = sc.get("dx.b", {S, D});
    be.rmsnorm_bwd(dhf, xs[L], norm_w, rstd, dx, params_.grad("model.norm.weight"));
    for (int64_t l = L - 1; l >= 0; --l) {
        const std::string pre = layer_prefix(l);
        layer_backward(lc, layer(l), layer_grads(params_, pre, dims_), acts[l], pos, pos,
                       AttnMask::causal(0), dx, sc, "L" + std::to_string(l), dprev, Tensor());
        std::swap(dx, dprev);
    }
    be.embedding_bwd(ids, dx, params_.grad("model.embed_tokens.weight"));
    return st;
}

TargetSession::TargetSession(const TargetModel& model, Backend& be, int64_t capacity,
                             std::vector<int64_t> capture)
    : model_(model), be_(be), capacity_(capacity), capture_(std::move(capture)) {
    check_capture(model.config(), capture_);
    const LayerDims& d = model.dims();
    cache_.resize(model.config().num_hidden_layers);
    for (auto& c : cache_) {
        c.k = HostTensor({capacity, d.Hkv, d.Dh});
        c.v = HostTensor({capacity, d.Hkv, d.Dh});
    }
}

int64_t TargetSession::feature_dim() const {
    return static_cast<int64_t>(capture_.size()) * model_.dims().D;
}

void TargetSession::forward(std::span<const int32_t> tokens, const Tensor& logits,
                            const Tensor& features) {
    const int64_t n = static_cast<int64_t>(tokens.size()), D = model_.dims().D;
    DF_CHECK(n > 0, "no tokens to feed to the target");
    DF_CHECK(len_ + n <= capacity_,
             "the sequence would reach {} tokens but the target session holds {} (context size)",
             len_ + n, capacity_);
    const int64_t V = model_.config().vocab_size;
    for (int32_t t : tokens)
        DF_CHECK(t >= 0 && t < V, "token id {} is outside the vocabulary [0, {})", t, V);
    Tensor ids = scratch_.get("ids", {n}, DType::i32);
    std::memcpy(ids.data(), tokens.data(), n * sizeof(int32_t));
    Tensor pos = scratch_.get("pos", {n}, DType::i32);
    fill_positions(pos, len_);
    Tensor x = scratch_.get("x", {n, D});
    be_.embedding_fwd(model_.embed(), ids, x);
    const LayerContext lc{be_, model_.dims(), model_.inv_freq()};
    for (int64_t l = 0; l < model_.config().num_hidden_layers; ++l) {
        layer_forward_cached(lc, model_.layer(l), x, Tensor(), pos, pos, cache_[l], len_,
                             AttnMaskKind::causal, scratch_, x);
        for (size_t c = 0; c < capture_.size(); ++c)
            if (capture_[c] == l && !features.empty()) scatter_feature(features, c, x);
    }
    if (!logits.empty()) {
        Tensor h = scratch_.get("final", {n, D});
        be_.rmsnorm_fwd(x, model_.params().value("model.norm.weight"), model_.dims().eps, h,
                        Tensor());
        be_.gemm(h, false, model_.lm_head(), true, logits);
    }
    len_ += n;
}

void TargetSession::crop(int64_t len) {
    DF_ASSERT(len >= 0 && len <= len_, "crop to {} with {} cached", len, len_);
    len_ = len;
}

}  // namespace dflash
